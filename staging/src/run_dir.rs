use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::{Error, LATEST, Retry, State, TMP_PREFIX, fault, sync_dir};

/// A run directory being written: `runs/.tmp-<run_id>/` until [`RunDir::commit`].
#[derive(Debug)]
pub struct RunDir {
    root: PathBuf,
    run_id: String,
    tmp: PathBuf,
    files: Vec<PathBuf>,
}

/// A Parquet table in a run directory, written batch by batch.
pub struct TableWriter {
    writer: ArrowWriter<File>,
    file: File,
    path: PathBuf,
    rows: usize,
}

impl std::fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableWriter")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish()
    }
}

impl TableWriter {
    /// Creates `path` and a zstd Parquet writer for `schema`.
    pub fn create(path: &Path, schema: Arc<Schema>) -> Result<Self, Error> {
        let file =
            crate::files::create_fresh(path).map_err(|source| Error::io("create", path, source))?;
        let clone = file
            .try_clone()
            .map_err(|source| Error::io("open", path, source))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let writer = ArrowWriter::try_new(clone, schema, Some(props))
            .map_err(|source| Error::parquet(path, source))?;
        Ok(Self {
            writer,
            file,
            path: path.to_path_buf(),
            rows: 0,
        })
    }

    /// Appends one batch.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        self.rows += batch.num_rows();
        self.writer
            .write(batch)
            .map_err(|source| Error::parquet(&self.path, source))
    }

    /// Rows written so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Writes the footer, syncs the file to disk and returns its path.
    pub fn close(self) -> Result<PathBuf, Error> {
        self.writer
            .close()
            .map_err(|source| Error::parquet(&self.path, source))?;
        self.file
            .sync_all()
            .map_err(|source| Error::io("sync", &self.path, source))?;
        Ok(self.path)
    }
}

impl RunDir {
    pub(crate) fn create(root: &Path, run_id: &str) -> Result<Self, Error> {
        let runs = root.join("runs");
        let tmp = runs.join(format!("{TMP_PREFIX}{run_id}"));
        // A new directory, never one that exists (or a link to one).
        fs::create_dir(&tmp).map_err(|source| Error::io("create directory", &tmp, source))?;
        // Before anything else: the marker that lets recovery prove this
        // directory is an uncommitted run of this program.
        let marked = write_synced(&tmp.join(RUN_MARKER), marker(run_id).as_bytes())
            .and_then(|()| sync_dir(&tmp))
            .and_then(|()| sync_dir(&runs));
        if let Err(e) = marked {
            // Created just now, by this call: removing it is safe.
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        Ok(Self {
            root: root.to_path_buf(),
            run_id: run_id.to_string(),
            tmp,
            files: Vec::new(),
        })
    }

    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Where the run is being written (the temporary directory).
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Where the run will be once committed.
    pub fn final_path(&self) -> PathBuf {
        self.root.join("runs").join(&self.run_id)
    }

    /// Opens `<name>.parquet` in the run directory.
    pub fn table(&mut self, name: &str, schema: Arc<Schema>) -> Result<TableWriter, Error> {
        let path = self.tmp.join(format!("{name}.parquet"));
        self.files.push(path.clone());
        TableWriter::create(&path, schema)
    }

    /// Writes `value` as pretty JSON to `name`, synced.
    pub fn write_json<T: serde::Serialize>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<PathBuf, Error> {
        let path = self.tmp.join(name);
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
            path: path.clone(),
            source,
        })?;
        bytes.push(b'\n');
        write_synced(&path, &bytes)?;
        self.files.push(path.clone());
        Ok(path)
    }

    /// Writes raw bytes to `name`, synced.
    pub fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<PathBuf, Error> {
        let path = self.tmp.join(name);
        write_synced(&path, bytes)?;
        self.files.push(path.clone());
        Ok(path)
    }

    /// Publishes the run and commits `state` with it.
    ///
    /// Order:
    /// 1. the next state (with this run in its history) is written, complete
    ///    and synced, to `state/records.parquet.next-<run_id>`;
    /// 2. the run directory is synced and renamed to `runs/<run_id>`: the
    ///    commit point, the one rename that makes the run visible;
    /// 3. the next state replaces `state/records.parquet`, then `LATEST` is
    ///    replaced, each by rename.
    ///
    /// A crash before 2 leaves a temporary directory and a `.next-` file
    /// that [`crate::StagingDir::recover`] removes (the records are redone);
    /// a crash after 2 leaves a published run whose state recovery rolls
    /// forward, so a run that readers could see is never taken back.
    pub fn commit(self, state: &mut State, retry: &Retry) -> Result<PathBuf, Error> {
        let state_dir = self.root.join("state");
        state.push_run(&self.run_id);
        // The receipt is anchored in the state: a receipt rewritten with
        // its tables later no longer matches what the commit recorded.
        let receipt = self.tmp.join("receipt.json");
        if let Ok(bytes) = fs::read(&receipt) {
            use sha2::Digest as _;
            state.anchor_receipt(&self.run_id, &hex::encode(sha2::Sha256::digest(&bytes)));
        }
        let next = State::next_path(&state_dir, &self.run_id);
        state.write_file(&next, &next)?;
        sync_dir(&state_dir)?;
        sync_dir(&self.tmp)?;
        fault::point("commit.before_run_rename");
        let target = self.final_path();
        retry
            .io("rename_run", || fs::rename(&self.tmp, &target))
            .map_err(|source| Error::io("rename run directory", &target, source))?;
        sync_dir(&self.root.join("runs"))?;
        fault::point("commit.after_run_rename");
        finish_commit(&self.root, &self.run_id, retry).map_err(|e| Error::Unfinished {
            run_id: self.run_id.clone(),
            source: Box::new(e),
        })?;
        Ok(target)
    }
}

/// Steps 3 of [`RunDir::commit`]: the published run's next state replaces
/// the state, then `LATEST` names the run.
pub(crate) fn finish_commit(root: &Path, run_id: &str, retry: &Retry) -> Result<(), Error> {
    let state_dir = root.join("state");
    let next = State::next_path(&state_dir, run_id);
    let path = state_dir.join("records.parquet");
    fault::point("commit.before_state_replace");
    retry
        .io("replace_state", || fs::rename(&next, &path))
        .map_err(|source| Error::io("replace state", &path, source))?;
    sync_dir(&state_dir)?;
    fault::point("commit.after_state_replace");
    fault::point("commit.before_latest_replace");
    retry
        .io("replace_latest", || {
            replace_atomically(&root.join(LATEST), format!("{run_id}\n").as_bytes()).map_err(|e| {
                match e {
                    Error::Io { source, .. } => source,
                    other => std::io::Error::other(other.to_string()),
                }
            })
        })
        .map_err(|source| Error::io("replace", &root.join(LATEST), source))?;
    fault::point("commit.after_latest_replace");
    Ok(())
}

/// The marker file every run directory gets first, before any output: what
/// recovery needs to find in a `.tmp-*` directory before it removes it.
pub const RUN_MARKER: &str = ".tomlite-run";

/// The marker's content for a run.
pub(crate) fn marker(run_id: &str) -> String {
    format!("tomlite run directory {run_id}\n")
}

/// Whether `dir` (not a link) holds the marker (a regular file, not a link)
/// of run `run_id`.
pub(crate) fn has_marker(dir: &Path, run_id: &str) -> bool {
    let is_dir = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir());
    let path = dir.join(RUN_MARKER);
    is_dir
        && crate::files::not_a_file(&path).is_none()
        && fs::symlink_metadata(&path).is_ok()
        && fs::read(&path).is_ok_and(|b| b == marker(run_id).as_bytes())
}

/// Whether `dir` is a temporary directory of run `run_id` that this program
/// created and never committed: a real directory (not a link) holding its
/// marker, or one killed while it was being marked (empty, or nothing but a
/// partly written marker).
pub(crate) fn is_uncommitted(dir: &Path, run_id: &str) -> bool {
    if has_marker(dir, run_id) {
        return true;
    }
    if !fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir()) {
        return false;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    match names.as_slice() {
        [] => true,
        [only] if only == RUN_MARKER => {
            let path = dir.join(RUN_MARKER);
            crate::files::not_a_file(&path).is_none()
                && fs::read(&path).is_ok_and(|b| marker(run_id).as_bytes().starts_with(&b))
        }
        _ => false,
    }
}

/// Writes `bytes` to a new file `path` (no link followed; a stale regular
/// file replaced) and syncs it.
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut f =
        crate::files::create_fresh(path).map_err(|source| Error::io("create", path, source))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|source| Error::io("write", path, source))
}

/// Replaces `path` with `bytes` atomically: a synced `.tmp` sibling, a rename,
/// a synced parent directory.
pub(crate) fn replace_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = tmp_sibling(path);
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|source| Error::io("rename", path, source))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(crate) fn tmp_sibling(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

pub(crate) fn write_latest(root: &Path, run_id: &str) -> Result<(), Error> {
    replace_atomically(&root.join(LATEST), format!("{run_id}\n").as_bytes())
}
