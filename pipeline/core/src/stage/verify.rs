//! Sealed receipts and `tomlite verify`.
//!
//! A run's `receipt.json` lists every file of its run directory with its size
//! and sha256 (`files`), computed after the last of them is written and
//! before the rename that commits the run. Two files are not in the list:
//! the receipt itself (it cannot hold its own hash) and `events.jsonl` (the
//! status stream goes on through the commit and gets its last event after
//! it). [`verify_run`] re-reads a run directory against its receipt;
//! [`verify_staging`] does that for every run the state lists and checks the
//! state's list of runs against `runs/` and `LATEST`.

use crate::stage::receipt::{Outcome, Receipt};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tomlite_staging::{LATEST, State, TMP_PREFIX};

/// The receipt's name in a run directory.
pub const RECEIPT: &str = "receipt.json";
/// The status stream's name in a run directory.
pub const EVENTS: &str = "events.jsonl";
/// Files of a run directory its receipt does not list: the receipt (it
/// cannot hold its own hash) and the status stream (appended after the
/// commit).
pub const UNSEALED: [&str; 2] = [RECEIPT, EVENTS];

/// A file of a run as its receipt lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedFile {
    /// The file's name in the run directory.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// sha256 of its bytes, hex.
    pub sha256: String,
}

/// Size and sha256 of a file, read once.
fn measure(path: &Path) -> std::io::Result<(u64, String)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut bytes = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        h.update(&buf[..n]);
    }
    Ok((bytes, hex::encode(h.finalize())))
}

/// Every regular file of a run directory but the [`UNSEALED`] ones, by name,
/// with its size and sha256.
pub fn seal(dir: &Path) -> Result<Vec<SealedFile>, tomlite_staging::Error> {
    let io = |op, path: &Path, source| tomlite_staging::Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io("list", dir, e))? {
        let entry = entry.map_err(|e| io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if UNSEALED.contains(&name.as_str())
            || !entry
                .file_type()
                .map_err(|e| io("stat", &path, e))?
                .is_file()
        {
            continue;
        }
        let (bytes, sha256) = measure(&path).map_err(|e| io("read", &path, e))?;
        files.push(SealedFile {
            name,
            bytes,
            sha256,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// `receipt` with `files` set to the [`seal`] of `dir`, as written: JSON
/// with sorted keys.
pub fn sealed(mut receipt: Receipt, dir: &Path) -> Result<Value, tomlite_staging::Error> {
    let files = seal(dir)?;
    receipt.files = Some(serde_json::to_value(files).unwrap_or_default());
    Ok(receipt.to_json())
}

/// What [`verify_run`] found in one run directory.
#[derive(Debug, Clone, Serialize)]
pub struct RunCheck {
    /// The run directory.
    pub dir: PathBuf,
    /// The run id its receipt names.
    pub run_id: Option<String>,
    /// Files its receipt lists.
    pub files: usize,
    /// What differs, each naming the file.
    pub differences: Vec<String>,
    /// sha256 of the receipt's bytes as read for this check (read once, so
    /// the anchor check and the file checks see the same receipt).
    #[serde(skip)]
    receipt_sha256: Option<String>,
}

/// What [`verify_staging`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// The staging directory, when one was checked.
    pub staging: Option<PathBuf>,
    /// Each run checked.
    pub runs: Vec<RunCheck>,
    /// Differences between the state's list of runs, `runs/` and `LATEST`.
    pub differences: Vec<String>,
    /// Entries left out: temporary run directories (a run in progress or
    /// one the next run's recovery removes).
    pub not_checked: Vec<String>,
}

impl Verification {
    /// Whether nothing differs.
    pub fn ok(&self) -> bool {
        self.differences.is_empty() && self.runs.iter().all(|r| r.differences.is_empty())
    }

    /// Every difference, each naming what differs.
    pub fn all_differences(&self) -> impl Iterator<Item = &String> {
        self.differences
            .iter()
            .chain(self.runs.iter().flat_map(|r| r.differences.iter()))
    }
}

/// A run directory's name, when the receipt's files list may name it: one
/// plain file name, no separator, not `.` or `..`.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The run's receipt as JSON with the sha256 of its bytes, or `None` (why
/// in `found`) when it cannot be read.
fn read_receipt(dir: &Path, found: &mut Vec<String>) -> Option<(Value, String)> {
    // A FIFO or a device would block the read or never end: only a
    // regular file is a receipt.
    match std::fs::symlink_metadata(dir.join(RECEIPT)) {
        Ok(metadata) if !metadata.file_type().is_file() => {
            found.push(format!("{RECEIPT}: not a regular file"));
            return None;
        }
        _ => {}
    }
    let bytes = match std::fs::read(dir.join(RECEIPT)) {
        Ok(bytes) => bytes,
        Err(e) => {
            found.push(format!("{RECEIPT}: cannot read it: {e}"));
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(receipt) => Some((receipt, crate::hash::sha256_bytes(&bytes))),
        Err(e) => {
            found.push(format!("{RECEIPT}: not JSON: {e}"));
            None
        }
    }
}

/// The files the receipt seals, or `None` (why in `found`) when it lists
/// none or its list cannot be read.
fn sealed_list(receipt: &Value, found: &mut Vec<String>) -> Option<Vec<SealedFile>> {
    match receipt
        .get("files")
        .map(|files| serde_json::from_value::<Vec<SealedFile>>(files.clone()))
    {
        None => {
            found.push(format!(
                "{RECEIPT}: lists no files (a receipt written before receipts were sealed): the run cannot be verified"
            ));
            None
        }
        Some(Err(e)) => {
            found.push(format!("{RECEIPT}: its files list is not readable: {e}"));
            None
        }
        Some(Ok(files)) => Some(files),
    }
}

/// Checks one file the receipt seals: there, a regular file, of the
/// sealed size and content.
fn check_sealed_file(dir: &Path, file: &SealedFile, found: &mut Vec<String>) {
    let name = &file.name;
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            found.push(format!("{name}: missing (the receipt lists it)"));
            return;
        }
        Err(e) => {
            found.push(format!("{name}: cannot read it: {e}"));
            return;
        }
        Ok(metadata) if !metadata.file_type().is_file() => {
            found.push(format!("{name}: not a regular file"));
            return;
        }
        Ok(_) => {}
    }
    match measure(&path) {
        Err(e) => found.push(format!("{name}: cannot read it: {e}")),
        Ok((bytes, _)) if bytes != file.bytes => found.push(format!(
            "{name}: size differs: the receipt says {} bytes, the file has {bytes}",
            file.bytes
        )),
        Ok((_, sha)) if sha != file.sha256 => found.push(format!(
            "{name}: content differs: the receipt says sha256 {}, the file has {sha}",
            file.sha256
        )),
        Ok(_) => {}
    }
}

/// Checks the run directory's entries: each one the receipt lists or one
/// left unsealed, and the unsealed ones regular files.
fn check_entries(dir: &Path, listed: &[&str], found: &mut Vec<String>) {
    match std::fs::read_dir(dir) {
        Err(e) => found.push(format!(": cannot list the run directory: {e}")),
        Ok(entries) => {
            let mut extra: Vec<String> = entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| {
                    !listed.contains(&name.as_str()) && !UNSEALED.contains(&name.as_str())
                })
                .collect();
            extra.sort();
            for name in extra {
                found.push(format!("{name}: not listed in the receipt"));
            }
        }
    }
    for name in UNSEALED {
        if let Ok(metadata) = std::fs::symlink_metadata(dir.join(name))
            && !metadata.file_type().is_file()
        {
            found.push(format!("{name}: not a regular file"));
        }
    }
}

/// Checks the files of a run directory against its receipt.
fn check_files(dir: &Path) -> RunCheck {
    // What differs, each relative to the run directory.
    let mut found = Vec::new();
    let mut run_id = None;
    let mut files = 0;
    let mut receipt_sha256 = None;
    if let Some((receipt, sha256)) = read_receipt(dir, &mut found) {
        receipt_sha256 = Some(sha256);
        run_id = receipt["run_id"].as_str().map(str::to_string);
        if receipt["status"] != Outcome::Committed.as_str() {
            found.push(format!(
                "{RECEIPT}: status is {}, not \"committed\"",
                receipt["status"]
            ));
        }
        if let Some(sealed) = sealed_list(&receipt, &mut found) {
            files = sealed.len();
            let mut listed = Vec::new();
            for file in &sealed {
                if !plain_name(&file.name) || UNSEALED.contains(&file.name.as_str()) {
                    found.push(format!(
                        "{RECEIPT}: lists `{}`, which is not a sealed file of the run directory",
                        file.name
                    ));
                    continue;
                }
                listed.push(file.name.as_str());
                check_sealed_file(dir, file, &mut found);
            }
            check_entries(dir, &listed, &mut found);
        }
        recount(dir, &receipt, &mut found);
    }
    let shown = dir.display();
    RunCheck {
        dir: dir.to_path_buf(),
        run_id,
        files,
        differences: found
            .into_iter()
            .map(|what| format!("{shown}/{what}"))
            .collect(),
        receipt_sha256,
    }
}

/// The rows of a Parquet table, from its footer.
fn table_rows(path: &Path) -> Option<u64> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let metadata = std::fs::symlink_metadata(path).ok()?;
    if !metadata.file_type().is_file() {
        return None;
    }
    let reader = SerializedFileReader::new(std::fs::File::open(path).ok()?).ok()?;
    u64::try_from(reader.metadata().file_metadata().num_rows()).ok()
}

/// Recounts from the tables what the receipt counts: the promoted tags and
/// edges, and the queued tags, edges and unreadable annotations.
fn recount(dir: &Path, receipt: &Value, found: &mut Vec<String>) {
    let counts = &receipt["counts"];
    let count = |key: &str| counts[key].as_u64().unwrap_or(0);
    let checks = [
        (
            "promoted_tags.parquet",
            "promoted_tags",
            count("promoted_tags"),
        ),
        (
            "promoted_edges.parquet",
            "promoted_edges",
            count("promoted_edges"),
        ),
        (
            "quarantine.parquet",
            "quarantined_tags + quarantined_edges + quarantined_annotations",
            count("quarantined_tags")
                + count("quarantined_edges")
                + count("quarantined_annotations"),
        ),
    ];
    for (file, what, claimed) in checks {
        if let Some(rows) = table_rows(&dir.join(file))
            && rows != claimed
        {
            found.push(format!(
                "{RECEIPT}: counts {what} = {claimed}, but {file} holds {rows} rows"
            ));
        }
    }
}

/// Checks one run directory: its files against its receipt, and, when it
/// lies in a staging directory's `runs/`, that the state lists it under the
/// run id its receipt names.
pub fn verify_run(dir: &Path) -> RunCheck {
    let mut check = check_files(dir);
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let runs = dir.parent();
    let root = runs
        .filter(|r| r.file_name().is_some_and(|n| n == "runs"))
        .and_then(Path::parent)
        .filter(|r| r.join("state").is_dir());
    let shown = dir.display();
    if name.starts_with(TMP_PREFIX) {
        check.differences.push(format!(
            "{shown}: an unfinished run (a temporary directory), not committed"
        ));
    } else if let Some(root) = root {
        match State::load(&root.join("state")) {
            Err(e) => check
                .differences
                .push(format!("{}: cannot read the state: {e}", root.display())),
            Ok(state) if !state.runs().contains(&name) => check.differences.push(format!(
                "{shown}: not committed: the state of {} does not list run {name}",
                root.display()
            )),
            Ok(state) => {
                // The receipt as its commit recorded it in the state.
                if let Some(anchored) = state.receipt_sha256(&name)
                    && let Some(now) = check.receipt_sha256.clone()
                    && now != anchored
                {
                    check.differences.push(format!(
                        "{shown}/{RECEIPT}: differs from the receipt its commit recorded in the state (sha256 {anchored}, now {now})"
                    ));
                }
            }
        }
        if check.run_id.as_deref().is_some_and(|id| id != name) {
            check.differences.push(format!(
                "{shown}/{RECEIPT}: names run {}, not {name}",
                check.run_id.as_deref().unwrap_or_default()
            ));
        }
    }
    check
}

/// Why a staging directory cannot be verified at all.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Not a staging directory.
    #[error("{} is not a staging directory (no state/ folder)", .0.display())]
    NotStaging(PathBuf),
}

/// Checks every run the state of `root` lists ([`verify_run`]), and the
/// state's list of runs against `runs/` (a listed run that is missing, an
/// entry no state lists) and `LATEST` (it names the last listed run).
/// Temporary run directories are left out (a run may be in progress).
pub fn verify_staging(root: &Path) -> Result<Verification, VerifyError> {
    let state_dir = root.join("state");
    if !state_dir.is_dir() {
        return Err(VerifyError::NotStaging(root.to_path_buf()));
    }
    let mut out = Verification {
        staging: Some(root.to_path_buf()),
        runs: Vec::new(),
        differences: Vec::new(),
        not_checked: Vec::new(),
    };
    let state = match State::load(&state_dir) {
        Ok(s) => s,
        Err(e) => {
            out.differences.push(format!(
                "{}: cannot read the state: {e}",
                state_dir.display()
            ));
            return Ok(out);
        }
    };
    let runs_dir = root.join("runs");
    for run in state.runs() {
        let dir = runs_dir.join(run);
        if !plain_name(run) || run.starts_with(TMP_PREFIX) {
            out.differences.push(format!(
                "{}: lists run `{run}`, which is not a run directory name",
                state_dir.display()
            ));
            continue;
        }
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => out.runs.push(verify_run(&dir)),
            Ok(_) => out.differences.push(format!(
                "{}: the state lists it, but it is not a directory",
                dir.display()
            )),
            Err(_) => out.differences.push(format!(
                "{}: missing (the state lists run {run})",
                dir.display()
            )),
        }
    }
    if let Ok(entries) = std::fs::read_dir(&runs_dir) {
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let path = runs_dir.join(&name);
            if name.starts_with(TMP_PREFIX) {
                out.not_checked.push(format!(
                    "{}: a temporary run directory (a run in progress, or one the next run's recovery removes)",
                    path.display()
                ));
            } else if !state.runs().contains(&name) {
                out.differences.push(format!(
                    "{}: not listed by the state (a run killed after its commit point, which the next run completes, or not written by tomlite)",
                    path.display()
                ));
            }
        }
    }
    let latest_path = root.join(LATEST);
    let latest = std::fs::read_to_string(&latest_path)
        .ok()
        .map(|s| s.trim().to_string());
    let last = state.last_run().map(str::to_string);
    if latest != last {
        out.differences.push(format!(
            "{}: names {}, but the state's last run is {}",
            latest_path.display(),
            latest.map_or("nothing (absent)".to_string(), |l| format!("run {l}")),
            last.map_or("none".to_string(), |l| format!("run {l}")),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_lists_every_file_but_the_receipt_and_the_events() {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in [
            ("b.parquet", "bb"),
            ("a.parquet", "a"),
            (RECEIPT, "{}"),
            (EVENTS, "{}\n"),
        ] {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let files = seal(dir.path()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.parquet", "b.parquet"]);
        assert_eq!(files[1].bytes, 2);
        assert_eq!(files[1].sha256, crate::hash::sha256_bytes(b"bb"));
    }

    #[test]
    fn a_receipt_that_names_a_path_outside_the_run_is_a_difference() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r1");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(dir.path().join("outside"), "x").unwrap();
        let receipt = serde_json::json!({"run_id": "r1", "status": "committed",
            "files": [{"name": "../outside", "bytes": 1, "sha256": crate::hash::sha256_bytes(b"x")}]});
        std::fs::write(run.join(RECEIPT), receipt.to_string()).unwrap();
        let check = verify_run(&run);
        assert_eq!(check.differences.len(), 1, "{:?}", check.differences);
        assert!(check.differences[0].contains("lists `../outside`"));
    }
}
