//! SIGTERM and SIGINT stop a run cleanly: the signal only sets a flag
//! ([`Interrupt`]); the run checks it between records, between batches,
//! while it waits on a stalled input and before its commit point, and
//! then ends like a failed run (a final event naming the signal,
//! `failed/<run_id>/`, the lock released) with exit 143 or 130.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A signal that stops a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM (a supervisor, `kill`, a scheduler's time limit).
    Term,
    /// SIGINT (Ctrl-C).
    Int,
}

impl Signal {
    /// The signal's number.
    pub fn number(self) -> i32 {
        match self {
            Self::Term => signal_hook::consts::SIGTERM,
            Self::Int => signal_hook::consts::SIGINT,
        }
    }

    /// `SIGTERM` or `SIGINT`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Term => "SIGTERM",
            Self::Int => "SIGINT",
        }
    }

    /// The exit status of a run it stopped: 128 + the signal's number
    /// (143 for SIGTERM, 130 for SIGINT), as a shell reports it.
    pub fn exit_code(self) -> i32 {
        128 + self.number()
    }

    fn from_number(n: usize) -> Option<Self> {
        [Self::Term, Self::Int]
            .into_iter()
            .find(|s| usize::try_from(s.number()).ok() == Some(n))
    }
}

/// The flag SIGTERM and SIGINT set; cloned into whatever checks it.
/// [`Interrupt::default`] is never set by a signal (a library caller,
/// a test); [`Interrupt::on_signals`] is.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicUsize>);

impl Interrupt {
    /// A flag that SIGTERM and SIGINT set from now on (their handlers only
    /// store the signal's number; the process no longer dies of them).
    pub fn on_signals() -> std::io::Result<Self> {
        let flag = Self::default();
        for signal in [Signal::Term, Signal::Int] {
            let number = usize::try_from(signal.number()).unwrap_or_default();
            signal_hook::flag::register_usize(signal.number(), flag.0.clone(), number)?;
        }
        Ok(flag)
    }

    /// The signal received, if any.
    pub fn signal(&self) -> Option<Signal> {
        Signal::from_number(self.0.load(Ordering::Relaxed))
    }

    /// Sets the flag as `signal` would.
    pub fn raise(&self, signal: Signal) {
        let number = usize::try_from(signal.number()).unwrap_or_default();
        self.0.store(number, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_signal_is_read_back_with_its_exit_code() {
        let flag = Interrupt::default();
        assert_eq!(flag.signal(), None);
        assert!(flag.check().is_ok());
        flag.clone().raise(Signal::Int);
        assert_eq!(flag.signal(), Some(Signal::Int));
        assert_eq!(Signal::Int.exit_code(), 130);
        assert_eq!(Signal::Term.exit_code(), 143);
        let e = flag.check().unwrap_err();
        assert_eq!(e.exit_code(), 130);
        assert!(e.to_string().contains("SIGINT"), "{e}");
    }
}
