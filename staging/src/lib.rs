//! Staging directories for tomlite runs: one exclusive lock per directory,
//! run directories written under a temporary name and published by one
//! rename, Parquet (zstd) tables, and the processed-record state that makes
//! the next run incremental.
//!
//! The crate knows Arrow record batches and files, nothing of ToM-lite. The
//! commit protocol is:
//!
//! 1. [`StagingDir::open`] takes the lock and [`StagingDir::recover`] removes
//!    what a killed run left behind (temporary run directories holding this
//!    program's marker, their next-state files) and leaves everything else
//!    alone;
//! 2. a [`RunDir`] is written under `runs/.tmp-<run_id>/`: every table and
//!    JSON file is flushed and synced as it is closed;
//! 3. [`RunDir::commit`] writes the next state beside the current one,
//!    renames the run directory to `runs/<run_id>` (the commit point), then
//!    replaces `state/records.parquet` and `LATEST`, each by rename.
//!
//! ```no_run
//! use std::sync::Arc;
//! use arrow_array::{ArrayRef, RecordBatch, StringArray};
//! use arrow_schema::{DataType, Field, Schema};
//! use tomlite_staging::StagingDir;
//!
//! # fn main() -> Result<(), tomlite_staging::Error> {
//! let staging = StagingDir::open("staging-out")?;
//! staging.recover()?;
//! let mut state = staging.load_state()?;
//! let mut run = staging.begin_run("20261129T010000Z-0001")?;
//! let schema = Arc::new(Schema::new(vec![Field::new("record_id", DataType::Utf8, false)]));
//! let mut table = run.table("abstained", schema.clone())?;
//! let ids: ArrayRef = Arc::new(StringArray::from(vec!["j-001"]));
//! table.write(&RecordBatch::try_new(schema, vec![ids]).unwrap())?;
//! table.close()?;
//! let committed = run.commit(&mut state, staging.retry())?;
//! println!("{}", committed.display());
//! # Ok(()) }
//! ```

mod error;
pub mod fault;
pub mod files;
mod lock;
pub mod retry;
mod run_dir;
mod state;

pub use error::Error;
pub use lock::StagingLock;
pub use retry::Retry;
pub use run_dir::{RUN_MARKER, RunDir, TableWriter};
pub use state::{Digest, State, StateEntry, StateRow};

use std::fs;
use std::path::{Path, PathBuf};

/// Name of the file under the staging root that names the last committed run.
pub const LATEST: &str = "LATEST";

/// The file that marks a staging root ([`StagingDir::open`] writes it):
/// a journal folder walker never enters a folder that holds it, so a
/// staging directory inside an input folder is never read back as records.
pub const STAGING_MARKER: &str = ".tomlite-staging";

/// Whether `dir` is a staging root: it holds [`STAGING_MARKER`], or (a
/// root written before the marker existed) `LATEST` beside `runs/` and
/// `state/`. Looks at names only and follows no link.
pub fn is_staging_root(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        fs::symlink_metadata(dir.join(name))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { m.is_file() })
    };
    is(STAGING_MARKER, false) || (is(LATEST, false) && is("runs", true) && is("state", true))
}

/// How [`Recovered::describe`] starts the line of a killed run's events
/// kept in `failed/`.
pub const KEPT_EVENTS: &str = "kept the killed run's events in";

/// Prefix of run directories that are still being written.
pub const TMP_PREFIX: &str = ".tmp-";
/// How [`Recovered::describe`] starts a line about an entry left alone.
pub const LEFT_ALONE: &str = "left alone";

/// An opened, locked staging directory.
#[derive(Debug)]
pub struct StagingDir {
    root: PathBuf,
    _lock: StagingLock,
    retry: Retry,
}

/// What [`StagingDir::recover`] found of an interrupted run.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Leftovers removed: temporary run directories and next-state files of
    /// runs killed before their commit point.
    pub removed: Vec<PathBuf>,
    /// Runs killed after their commit point whose state and `LATEST` were
    /// completed.
    pub completed: Vec<String>,
    /// The run `LATEST` was rewritten to name (a run killed after its state
    /// replacement, before `LATEST`'s).
    pub latest_rewritten: Option<String>,
    /// Entries of `runs/` (and `state/`) that this program cannot prove it
    /// wrote, left as they are, with why.
    pub left_alone: Vec<(PathBuf, &'static str)>,
    /// `failed/<run_id>/` folders that keep a killed run's `events.jsonl`
    /// (moved out of its temporary directory before that was removed) and
    /// a receipt saying it was killed.
    pub kept_failed: Vec<PathBuf>,
}

impl Recovered {
    /// One line per thing done, for receipts: removed paths, completed
    /// commits, a rewritten `LATEST`.
    pub fn describe(&self) -> Vec<String> {
        self.removed
            .iter()
            .map(|p| p.display().to_string())
            .chain(
                self.completed
                    .iter()
                    .map(|r| format!("completed the commit of run {r}")),
            )
            .chain(
                self.latest_rewritten
                    .iter()
                    .map(|r| format!("rewrote LATEST to name run {r}")),
            )
            .chain(
                self.kept_failed
                    .iter()
                    .map(|p| format!("{KEPT_EVENTS} {}", p.display())),
            )
            .chain(self.warnings())
            .collect()
    }

    /// One line per entry left alone: `left alone <path>: <why>`.
    pub fn warnings(&self) -> Vec<String> {
        self.left_alone
            .iter()
            .map(|(p, why)| format!("{LEFT_ALONE} {}: {why}", p.display()))
            .collect()
    }
}

impl StagingDir {
    /// Creates the directory layout if needed and takes the exclusive lock.
    ///
    /// Fails with [`Error::Locked`] when another process holds it.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, Error> {
        let root = root.as_ref().to_path_buf();
        for dir in [root.clone(), root.join("runs"), root.join("state")] {
            fs::create_dir_all(&dir)
                .map_err(|source| Error::io("create directory", &dir, source))?;
        }
        let lock = StagingLock::acquire(&root)?;
        let marker = root.join(STAGING_MARKER);
        // Created without following a link; one already there is kept.
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(Error::io("create the staging marker", &marker, source)),
        }
        Ok(Self {
            root,
            _lock: lock,
            retry: Retry::default(),
        })
    }

    /// The staging root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The retry counter of this run's I/O (see [`Retry::io`]).
    pub fn retry(&self) -> &Retry {
        &self.retry
    }

    /// Directory that holds published runs.
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// Directory that holds the processed-record state.
    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }

    /// Finishes or undoes what an interrupted run left behind.
    ///
    /// Only what this program can prove it wrote and never committed is
    /// removed: a `.tmp-<run_id>` directory (a real one, not a link) that
    /// holds its run's marker file ([`RUN_MARKER`], written before anything
    /// else), the state's own temp and next-state files, a stale
    /// `LATEST.tmp`. A published run that the state does not list yet
    /// reached its commit point: its next state is moved into place.
    /// Anything else in `runs/` (a folder or file of someone else's, a
    /// `.tmp-*` without the marker, a link) is left alone and listed in
    /// [`Recovered::left_alone`]. Committed runs of this program that the
    /// state does not list and no next state completes mean the state file
    /// was lost or is older than the runs: [`Error::StateBehind`], before
    /// anything is changed. `LATEST` is rewritten from the state when it
    /// lags.
    pub fn recover(&self) -> Result<Recovered, Error> {
        let state_dir = self.state_dir();
        let mut out = Recovered::default();
        let latest_tmp = run_dir::tmp_sibling(&self.root.join(LATEST));
        if let Some(what) = files::not_a_file(&latest_tmp) {
            return Err(Error::io(
                "replace",
                &latest_tmp,
                files::refused(&latest_tmp, what),
            ));
        }
        let committed = State::load(&state_dir)?.runs().to_vec();
        let runs = self.runs_dir();
        let mut names = Vec::new();
        let entries = fs::read_dir(&runs).map_err(|source| Error::io("list", &runs, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::io("list", &runs, source))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        // Decide everything first: an unlisted committed run stops recovery
        // before anything is removed or rolled forward.
        let (mut remove, mut complete, mut behind) = (Vec::new(), Vec::new(), Vec::new());
        for name in names {
            let path = runs.join(&name);
            let is_dir = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir());
            if let Some(run_id) = name.strip_prefix(TMP_PREFIX) {
                if run_dir::is_uncommitted(&path, run_id) {
                    remove.push(path);
                } else {
                    let why = match files::not_a_file(&path) {
                        Some("a directory") => {
                            "no marker of an uncommitted run of this program inside"
                        }
                        Some("a symbolic link") => "a symbolic link (never followed)",
                        _ => "not a directory (not a run of this program)",
                    };
                    out.left_alone.push((path, why));
                }
            } else if committed.contains(&name) {
                continue;
            } else if !is_dir {
                let why = if files::not_a_file(&path) == Some("a symbolic link") {
                    "a symbolic link (never followed)"
                } else {
                    "not a directory (not a run of this program)"
                };
                out.left_alone.push((path, why));
            } else if State::next_path(&state_dir, &name).is_file() {
                complete.push(name);
            } else if is_committed_run(&path, &name) {
                behind.push(name);
            } else {
                out.left_alone.push((
                    path,
                    "not a run directory of this program (no marker or receipt naming it)",
                ));
            }
        }
        if !behind.is_empty() {
            return Err(Error::StateBehind {
                state: state_dir.join("records.parquet"),
                runs_dir: runs,
                runs: behind,
            });
        }
        for path in remove {
            if let Some(kept) = self.keep_killed_events(&path) {
                out.kept_failed.push(kept);
            }
            fs::remove_dir_all(&path).map_err(|source| Error::io("remove", &path, source))?;
            out.removed.push(path);
        }
        for name in complete {
            run_dir::finish_commit(&self.root, &name, &self.retry)?;
            out.completed.push(name);
        }
        let entries =
            fs::read_dir(&state_dir).map_err(|source| Error::io("list", &state_dir, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::io("list", &state_dir, source))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "records.parquet.tmp" || name.starts_with("records.parquet.next-") {
                let path = entry.path();
                if files::not_a_file(&path).is_some() {
                    out.left_alone
                        .push((path, "not a regular file (not written by this program)"));
                    continue;
                }
                fs::remove_file(&path).map_err(|source| Error::io("remove", &path, source))?;
                out.removed.push(path);
            }
        }
        if latest_tmp.is_file() {
            fs::remove_file(&latest_tmp)
                .map_err(|source| Error::io("remove", &latest_tmp, source))?;
            out.removed.push(latest_tmp);
        }
        let state = State::load(&state_dir)?;
        if let Some(last) = state.last_run()
            && self.latest()?.as_deref() != Some(last)
        {
            run_dir::write_latest(&self.root, last)?;
            if !out.completed.iter().any(|c| c == last) {
                out.latest_rewritten = Some(last.to_string());
            }
        }
        if !out.removed.is_empty() {
            sync_dir(&runs)?;
            sync_dir(&state_dir)?;
        }
        Ok(out)
    }

    /// Moves a killed run's `events.jsonl` out of its temporary directory
    /// `tmp` into `failed/<run_id>/`, with a small receipt written first
    /// (status `killed`). Best effort: the run was killed, its stream is
    /// what tells why; nothing is followed through a link, and a
    /// `failed` that is not a directory, or a folder already there, keeps
    /// nothing.
    fn keep_killed_events(&self, tmp: &Path) -> Option<PathBuf> {
        let run_id = tmp.file_name()?.to_str()?.strip_prefix(TMP_PREFIX)?;
        let events = tmp.join("events.jsonl");
        if files::not_a_file(&events).is_some() || !events.is_file() {
            return None;
        }
        let failed = self.root.join("failed");
        match fs::symlink_metadata(&failed) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => return None,
            Err(_) => fs::create_dir(&failed).ok()?,
        }
        let dir = failed.join(run_id);
        fs::create_dir(&dir).ok()?;
        let receipt = serde_json::json!({
            "run_id": run_id,
            "status": "killed",
            "bug_or_blocker": "the run was killed before it committed (SIGKILL, a crash or a power loss); the next run's recovery kept its events and removed its temporary directory",
            "next_step": "read events.jsonl for the last phase the run reached; its records were not committed and the next run processes them again",
            "events": dir.join("events.jsonl").display().to_string(),
        });
        let mut bytes = serde_json::to_vec_pretty(&receipt).ok()?;
        bytes.push(b'\n');
        let mut file = files::create_fresh(&dir.join("receipt.json")).ok()?;
        std::io::Write::write_all(&mut file, &bytes).ok()?;
        file.sync_all().ok()?;
        fs::rename(&events, dir.join("events.jsonl")).ok()?;
        sync_dir(&dir).ok()?;
        Some(dir)
    }

    /// Loads the committed processed-record state (empty before the first run).
    pub fn load_state(&self) -> Result<State, Error> {
        State::load(&self.state_dir())
    }

    /// The run id `LATEST` names, if any run was committed.
    pub fn latest(&self) -> Result<Option<String>, Error> {
        let path = self.root.join(LATEST);
        match fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::io("read", &path, source)),
        }
    }

    /// Starts a run: creates `runs/.tmp-<run_id>/`.
    pub fn begin_run(&self, run_id: &str) -> Result<RunDir, Error> {
        RunDir::create(&self.root, run_id)
    }
}

/// Whether `dir` is a committed run directory of this program named
/// `run_id`: its marker, or (runs committed before the marker existed) a
/// `receipt.json` whose `run_id` is the directory's name.
fn is_committed_run(dir: &Path, run_id: &str) -> bool {
    if run_dir::has_marker(dir, run_id) {
        return true;
    }
    let receipt = dir.join("receipt.json");
    if files::not_a_file(&receipt).is_some() {
        return false;
    }
    fs::read(&receipt)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["run_id"].as_str() == Some(run_id))
}

/// Syncs a directory so that renames and new entries in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    let f = fs::File::open(dir).map_err(|source| Error::io("open directory", dir, source))?;
    f.sync_all()
        .map_err(|source| Error::io("sync directory", dir, source))
}
