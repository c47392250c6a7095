//! Why a run stops without committing, and the exit code that says so.

use std::path::PathBuf;

use crate::annotate::AnnotateError;
use crate::ingest::record::IngestError;
use crate::run::interrupt::{Interrupt, Signal};

/// Errors that stop a run; nothing is committed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The staging directory failed (including: locked).
    #[error(transparent)]
    Staging(#[from] tomlite_staging::Error),
    /// An input cannot be read at all.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// The annotator failed as a whole.
    #[error(transparent)]
    Annotate(#[from] AnnotateError),
    /// The status stream cannot be written.
    #[error("cannot write status events to {}", path.display())]
    Events {
        /// The events file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The report cannot be built.
    #[error(transparent)]
    Report(crate::report::ReportError),
    /// The curated decisions cannot be read.
    #[error("cannot read the curated decisions: {message}")]
    Curated {
        /// What went wrong.
        message: String,
    },
    /// Too many records failed: the annotator is broken, not the records.
    /// Nothing is committed.
    #[error(
        "{failed} of {attempted} records failed to annotate (more than the allowed share {share}; records that failed in earlier runs not counted); first: {first}"
    )]
    FailureBudget {
        /// Failed records so far.
        failed: u64,
        /// Records annotated so far.
        attempted: u64,
        /// The allowed share.
        share: f64,
        /// The first failure.
        first: String,
    },
    /// SIGTERM or SIGINT: the run stopped before its commit point.
    #[error(
        "stopped by {}: the run ended cleanly before its commit point; nothing was committed",
        signal.name()
    )]
    Interrupted {
        /// The signal.
        signal: Signal,
    },
    /// An input cannot be opened.
    #[error("cannot read input {}", path.display())]
    Hash {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Interrupt {
    /// An error when a signal was received: the run stops here.
    pub(super) fn check(&self) -> Result<(), RunError> {
        match self.signal() {
            Some(signal) => Err(RunError::Interrupted { signal }),
            None => Ok(()),
        }
    }
}

impl RunError {
    /// The exit code this error ends `tomlite run` with: 3 for a locked
    /// staging directory, 143 or 130 for SIGTERM or SIGINT, 1 otherwise
    /// (README, "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Staging(tomlite_staging::Error::Locked { .. }) => 3,
            Self::Interrupted { signal } => signal.exit_code(),
            _ => 1,
        }
    }
}
