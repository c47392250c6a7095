//! Named fault points for crash tests.
//!
//! With the `failpoints` feature, [`point`] consults the `fail` crate's
//! registry (configured from the `FAILPOINTS` environment variable by the
//! binary): any action that returns (`return`, `1*return`, …) aborts the
//! process on the spot, as a kill would (no destructor runs, no buffer is
//! flushed); `sleep(ms)` and `pause` delay it. Without the feature a fault
//! point compiles to nothing.

/// Every fault point of a run's commit, in the order a run passes them.
pub const COMMIT_POINTS: [&str; 6] = [
    "commit.before_run_rename",
    "commit.after_run_rename",
    "commit.before_state_replace",
    "commit.after_state_replace",
    "commit.before_latest_replace",
    "commit.after_latest_replace",
];

/// A fault point: aborts the process when the point is armed to return.
#[cfg(feature = "failpoints")]
pub fn point(name: &str) {
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("tomlite: fault point {name}: aborting");
        std::process::abort();
    }
}

/// A fault point: compiled out without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn point(_name: &str) {}

/// The value an armed point returns (`return(VALUE)`), without aborting:
/// for faults that are not kills (a failing record, a transient error).
#[cfg(feature = "failpoints")]
pub fn value(name: &str) -> Option<String> {
    fail::eval(name, |v| v.unwrap_or_default())
}

/// Always `None` without the `failpoints` feature.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn value(_name: &str) -> Option<String> {
    None
}
