//! Standard output that a closed pipe cannot crash: the `print!` and
//! `println!` of the binary write through [`write`].

use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The reader is gone: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The first write error other than a closed pipe.
static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes and flushes. A broken pipe (the reader exited: `| head -1`,
/// `| true`) drops this and every later write, and the command still
/// ends with the exit status of its work, which is done by then. Any
/// other error is kept for [`failure`] and also stops the output.
pub fn write(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_fmt(args).and_then(|()| out.flush()) {
        CLOSED.store(true, Ordering::Relaxed);
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            let mut failed = FAILED
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            failed.get_or_insert_with(|| error.to_string());
        }
    }
}

/// A write error other than a broken pipe, if one happened.
pub fn failure() -> Option<String> {
    FAILED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}
