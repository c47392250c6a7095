use std::path::{Path, PathBuf};

/// Errors of the staging crate; each names the file or directory involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file system operation failed.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the staging directory's lock.
    #[error("staging directory {} is locked by {holder}", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as the holder wrote it (pid and start time).
        holder: String,
    },
    /// Writing or reading a Parquet file failed.
    #[error("parquet error in {}", path.display())]
    Parquet {
        /// The Parquet file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// An Arrow operation failed on a file's batches.
    #[error("arrow error in {}", path.display())]
    Arrow {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// A state file does not have the expected shape.
    #[error("state file {} is not valid: {message}", path.display())]
    BadState {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The run was published (its commit point passed) but replacing the
    /// state or `LATEST` failed: the next run's recovery completes it.
    #[error("run {run_id} is published but its commit is unfinished (the next run completes it)")]
    Unfinished {
        /// The published run.
        run_id: String,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// `runs/` holds committed runs of this program that the state does not
    /// list and that no next-state file completes: the state file was lost
    /// or replaced by an older one. Recovery stops before changing anything.
    #[error(
        "{} does not list the committed run(s) {} in {} (the state file is missing, or older than the runs, e.g. restored from a backup); nothing was changed. Restore the state file that lists them, or move those run directories out of {} to have their records processed again",
        state.display(),
        list(runs),
        runs_dir.display(),
        runs_dir.display()
    )]
    StateBehind {
        /// The state file.
        state: PathBuf,
        /// The `runs/` directory.
        runs_dir: PathBuf,
        /// The committed runs the state does not list.
        runs: Vec<String>,
    },
    /// A JSON file could not be written.
    #[error("cannot write JSON to {}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn parquet(path: &Path, source: parquet::errors::ParquetError) -> Self {
        Self::Parquet {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The first few names, then how many more.
fn list(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}
