//! The time budget of a run: stop taking records when the next batch and
//! the commit would not fit before the deadline.

use std::time::{Duration, Instant};

/// The time budget: stop taking records when the next batch and the
/// commit would not fit before the deadline.
pub(super) struct Budget {
    deadline: Option<Instant>,
    started: Instant,
    /// The slowest batch so far.
    pub(super) batch: Duration,
    /// Records annotated so far that had not failed in an earlier run, and
    /// how many of them failed: the failure budget's share.
    pub(super) attempted: u64,
    /// See `attempted`.
    pub(super) failed: u64,
}

impl Budget {
    /// A budget with the run's deadline, if any, from `started`.
    pub(super) fn new(deadline: Option<Instant>, started: Instant) -> Self {
        Self {
            deadline,
            started,
            batch: Duration::ZERO,
            attempted: 0,
            failed: 0,
        }
    }

    /// Whether the next batch and the commit might not fit before the deadline.
    pub(super) fn near(&self) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        // Room for one more batch (with slack) and for closing the tables,
        // the report and the commit.
        let reserve = Duration::from_secs(1) + self.started.elapsed() / 50;
        Instant::now() + self.batch.mul_f64(1.5) + reserve >= deadline
    }
}
