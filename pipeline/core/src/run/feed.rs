//! An input's items as the run takes them, without hanging on a stalled
//! pipe.
//!
//! A regular file or a folder is read where the run stands (its reads do
//! not stall). A pipe, FIFO or socket (`--input /dev/stdin`, `<(ssh … cat)`,
//! a `zcat` on a hung mount) is opened and read by a thread of its own,
//! which sends the parsed items over a bounded channel; the run waits for
//! each with a timeout and gives up when its time budget is near (or a
//! signal came), so a writer that stalls ends the run at the budget with
//! what was read. The reader thread, blocked in a read that may never
//! return, is left behind: it owns nothing but the pipe, and the process
//! ends with the run.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use crate::ingest::InputDigest;
use crate::ingest::record::{IngestError, IngestOptions, Item, Items};
use crate::run::error::RunError;
use crate::run::interrupt::Interrupt;

/// Items a pipe's reader may parse ahead of the run.
const AHEAD: usize = 1024;
/// How often a wait looks at the signal flag and the budget.
const SLICE: Duration = Duration::from_millis(50);

/// What a piped input's reader sends.
pub(super) enum Msg {
    /// The input is open; its digest.
    Opened(InputDigest),
    /// One item (or the error that ends the input).
    Item(Result<Item, IngestError>),
    /// Every item was sent.
    End,
}

/// One input's items.
pub(super) enum Feed {
    /// A file or folder, read in place.
    Direct(Items),
    /// A pipe, read by its own thread.
    Piped { path: PathBuf, items: Receiver<Msg> },
}

/// What came next from a feed.
pub(super) enum Next {
    /// An item (or the input's read error).
    Item(Result<Item, IngestError>),
    /// The input is read to its end.
    End,
    /// Nothing came before the time budget ran short: the input stalled
    /// (`waited`: for how long).
    Stalled { waited: Duration },
}

/// How long a wait for a pipe may last: until a signal, or until
/// `give_up` (the time budget is near) says so.
pub(super) struct Wait<'a> {
    pub(super) interrupt: &'a Interrupt,
    pub(super) give_up: &'a dyn Fn() -> bool,
}

/// Whether `path` is read through a pipe's reader thread: anything that
/// is neither a regular file nor a folder (links followed; `stat` never
/// blocks, even on a FIFO).
pub(super) fn is_piped(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// An opened input, or a pipe that never opened (a FIFO without a
/// writer) before the budget ran short.
pub(super) enum Opened {
    /// Its items and the handle that gives its sha256.
    Ready(Feed, InputDigest),
    /// Not opened: nothing was read.
    Stalled { waited: Duration },
}

/// Opens a pipe in a reader thread; waits for it to open as for an item.
pub(super) fn open_piped(
    path: &Path,
    opts: &IngestOptions,
    wait: &Wait<'_>,
) -> Result<Result<Opened, IngestError>, RunError> {
    let (tx, rx) = sync_channel(AHEAD);
    let (owned, opts) = (path.to_path_buf(), opts.clone());
    let spawned = std::thread::Builder::new()
        .name("tomlite-read".into())
        .spawn(move || read_in_thread(&owned, &opts, &tx));
    if let Err(source) = spawned {
        return Ok(Err(IngestError::Io {
            path: path.to_path_buf(),
            source,
        }));
    }
    let started = Instant::now();
    match receive(&rx, wait)? {
        Got::GaveUp => Ok(Ok(Opened::Stalled {
            waited: started.elapsed(),
        })),
        Got::Msg(Msg::Opened(digest)) => Ok(Ok(Opened::Ready(
            Feed::Piped {
                path: path.to_path_buf(),
                items: rx,
            },
            digest,
        ))),
        Got::Msg(Msg::Item(Err(e))) => Ok(Err(e)),
        Got::Msg(_) | Got::Gone => Ok(Err(gone(path))),
    }
}

/// The reader thread: opens the input, sends its items, then `End`; stops
/// when the run no longer listens.
fn read_in_thread(path: &Path, opts: &IngestOptions, tx: &SyncSender<Msg>) {
    let (items, digest) = match crate::ingest::open_input(path, opts) {
        Ok(opened) => opened,
        Err(e) => {
            let _ = tx.send(Msg::Item(Err(e)));
            return;
        }
    };
    if tx.send(Msg::Opened(digest)).is_err() {
        return;
    }
    for item in items {
        if tx.send(Msg::Item(item)).is_err() {
            return;
        }
    }
    let _ = tx.send(Msg::End);
}

/// What a wait for the reader thread got.
enum Got {
    /// A message.
    Msg(Msg),
    /// Nothing before `wait` gave up.
    GaveUp,
    /// The reader ended without saying `End` (a panic).
    Gone,
}

/// The next message, unless `wait` gives up first.
fn receive(rx: &Receiver<Msg>, wait: &Wait<'_>) -> Result<Got, RunError> {
    loop {
        wait.interrupt.check()?;
        match rx.recv_timeout(SLICE) {
            Ok(msg) => return Ok(Got::Msg(msg)),
            Err(RecvTimeoutError::Timeout) => {
                if (wait.give_up)() {
                    return Ok(Got::GaveUp);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(Got::Gone),
        }
    }
}

/// The error of a reader thread that ended before the input did.
fn gone(path: &Path) -> IngestError {
    IngestError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other("the input's reader stopped before the end of the input"),
    }
}

impl Feed {
    /// The next item; a pipe's is waited for as `wait` allows.
    pub(super) fn next(&mut self, wait: &Wait<'_>) -> Result<Next, RunError> {
        match self {
            Self::Direct(items) => Ok(items.next().map_or(Next::End, Next::Item)),
            Self::Piped { path, items } => {
                let started = Instant::now();
                let got = match items.try_recv() {
                    Ok(msg) => Got::Msg(msg),
                    Err(_) => receive(items, wait)?,
                };
                Ok(match got {
                    Got::GaveUp => Next::Stalled {
                        waited: started.elapsed(),
                    },
                    Got::Msg(Msg::Item(item)) => Next::Item(item),
                    Got::Msg(Msg::End) => Next::End,
                    Got::Msg(Msg::Opened(_)) | Got::Gone => Next::Item(Err(gone(path))),
                })
            }
        }
    }
}
