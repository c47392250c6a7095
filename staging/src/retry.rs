//! Bounded retries of transient I/O errors: the seed's tool transient retry,
//! default 1 retry, hard maximum 2, never self-overridable. The operator may
//! raise a run's budget up to the hard maximum (`tomlite run
//! --transient-retries 2`); nothing raises it further.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Retries after the first attempt, unless the operator sets another budget
/// (the seed's default for a transient tool failure).
pub const DEFAULT_RETRIES: u32 = 1;
/// The most retries any budget allows (the seed's hard maximum without
/// project-agent approval).
pub const MAX_RETRIES: u32 = 2;
/// Wait before retry 1; doubled for retry 2.
pub const BACKOFF: Duration = Duration::from_millis(100);

/// Failed runs of the same content after which a record is poison: skipped
/// until the record or the annotator changes (the seed's bounded retries
/// across nights, where the retries above are within one).
pub const POISON_AFTER: u32 = 3;

/// The retry budget of a run, and what it used.
#[derive(Debug)]
pub struct Retry {
    limit: AtomicU32,
    used: AtomicU32,
    /// Per operation, the most attempts one call took.
    attempts: Mutex<BTreeMap<String, u32>>,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            limit: AtomicU32::new(DEFAULT_RETRIES),
            used: AtomicU32::new(0),
            attempts: Mutex::new(BTreeMap::new()),
        }
    }
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

    /// Retries one call may use.
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Sets the retries one call may use, at most [`MAX_RETRIES`] (a larger
    /// value is capped); returns the budget now in force.
    pub fn set_limit(&self, retries: u32) -> u32 {
        let n = retries.min(MAX_RETRIES);
        self.limit.store(n, Ordering::Relaxed);
        n
    }

    /// Per operation (`read_input`, `rename_run`, ...), the most attempts
    /// one call took so far (1: it was not retried).
    pub fn attempts(&self) -> BTreeMap<String, u32> {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The most attempts any call took so far; 1 when nothing was retried.
    pub fn max_attempts(&self) -> u32 {
        self.attempts().into_values().max().unwrap_or(1).max(1)
    }

    fn record(&self, what: &str, attempts: u32) {
        let mut map = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(what.to_string()).or_insert(0);
        *e = (*e).max(attempts);
    }

    /// Runs `f`; a transient error is retried at most [`Retry::limit`] times
    /// with backoff (100 ms, 200 ms). A permanent error, or a transient one
    /// past the budget, is returned. The fault point `io.<what>` (armed with
    /// `N*return`) fails the first N attempts with a transient error.
    pub fn io<T>(
        &self,
        what: &str,
        mut f: impl FnMut() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let point = format!("io.{what}");
        let limit = self.limit();
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
                Err(e) if is_transient(&e) && attempt < limit => {
                    std::thread::sleep(BACKOFF * 2u32.pow(attempt));
                    attempt += 1;
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if attempt > 0 => {
                    self.record(what, attempt + 1);
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "{e} (after {attempt} {})",
                            if attempt == 1 { "retry" } else { "retries" }
                        ),
                    ));
                }
                other => {
                    self.record(what, attempt + 1);
                    return other;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_is_one_retry_and_attempts_are_counted() {
        let r = Retry::default();
        assert_eq!(r.limit(), DEFAULT_RETRIES);
        let mut calls = 0;
        let err = r
            .io("test", || -> std::io::Result<()> {
                calls += 1;
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
            })
            .unwrap_err();
        assert_eq!(calls, 2);
        assert!(err.to_string().contains("after 1 retry"), "{err}");
        assert_eq!(r.max_attempts(), 2);
        r.io("other", || Ok(())).unwrap();
        assert_eq!(r.attempts()["other"], 1);
        assert_eq!(r.attempts()["test"], 2);
        // No budget goes past the seed's hard maximum.
        assert_eq!(r.set_limit(9), MAX_RETRIES);
    }

    #[test]
    fn transient_errors_are_retried_twice_then_returned() {
        let r = Retry::default();
        r.set_limit(2);
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
        assert_eq!(r.max_attempts(), 3);
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
