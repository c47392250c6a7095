//! Bounded retries of transient I/O errors (the seed's retry policy: at
//! most two retries, with backoff, never self-overridable).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 2;
/// Wait before retry 1; doubled for retry 2.
pub const BACKOFF: Duration = Duration::from_millis(100);

/// Counts the retries a run used.
#[derive(Debug, Default)]
pub struct Retry {
    used: AtomicU32,
}

/// Whether an I/O error may pass if tried again.
pub fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        Interrupted
            | WouldBlock
            | TimedOut
            | ResourceBusy
            | StaleNetworkFileHandle
            | ConnectionReset
            | ConnectionAborted
            | NetworkDown
            | HostUnreachable
    )
}

impl Retry {
    /// Retries used so far.
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// Runs `f`; a transient error is retried at most [`MAX_RETRIES`] times
    /// with backoff (100 ms, 200 ms). A permanent error, or the third
    /// transient one, is returned. The fault point `io.<what>` (armed with
    /// `N*return`) fails the first N attempts with a transient error.
    pub fn io<T>(
        &self,
        what: &str,
        mut f: impl FnMut() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let point = format!("io.{what}");
        let mut attempt = 0;
        loop {
            let result = match crate::fault::value(&point) {
                Some(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("injected transient error at {point}"),
                )),
                None => f(),
            };
            match result {
                Err(e) if is_transient(&e) && attempt < MAX_RETRIES => {
                    std::thread::sleep(BACKOFF * 2u32.pow(attempt));
                    attempt += 1;
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if attempt > 0 => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{e} (after {attempt} retries)"),
                    ));
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_retried_twice_then_returned() {
        let r = Retry::default();
        let mut calls = 0;
        let ok = r.io("test", || {
            calls += 1;
            if calls < 3 {
                Err(std::io::Error::from(std::io::ErrorKind::Interrupted))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(ok.unwrap(), 3);
        assert_eq!(r.used(), 2);
        let mut calls = 0;
        let err = r
            .io("test", || -> std::io::Result<()> {
                calls += 1;
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
            })
            .unwrap_err();
        assert_eq!(calls, 3);
        assert!(err.to_string().contains("after 2 retries"), "{err}");
        assert_eq!(r.used(), 4);
    }

    #[test]
    fn permanent_errors_are_not_retried() {
        let r = Retry::default();
        let mut calls = 0;
        let err = r
            .io("test", || -> std::io::Result<()> {
                calls += 1;
                Err(std::io::Error::from(std::io::ErrorKind::NotFound))
            })
            .unwrap_err();
        assert_eq!(calls, 1);
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(r.used(), 0);
    }
}
