//! A folder of `.md`/`.txt` journals: one record per file.
//!
//! The id is the file's path relative to the folder (`ada/2026-11-28.md`),
//! the persona is the first folder under the root (`ada`) or
//! `--journal-persona` for files at the root, `created_at` is the date the
//! file starts with, else its modification time.
//!
//! One walker (`list`) decides what is read, for the records and the
//! folder's sha256 alike: regular files and real folders only. Symbolic
//! links are never followed (a link to a file inside the folder would make a
//! second record of it, one outside would read what is not the folder's, a
//! link to a folder can loop). A link or a FIFO, socket or device that has a
//! journal's name, and any link to a folder or that cannot be resolved, is
//! one reject naming it; nothing of it is read or opened. Names starting
//! with `.` are skipped, and so is every folder that is a tomlite staging
//! root ([`tomlite_staging::is_staging_root`]): a staging directory kept
//! inside the journal folder is never read back as records.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::ingest::bytes::{Stamp, Tally, file_kind, open_regular, utf16};
use crate::ingest::record::{
    IngestError, IngestOptions, InputSha, Item, Items, Origin, Reject, journal_created_at,
    record_from_map,
};

/// One entry of a journal folder, as the walker found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A regular file with a journal's name: read.
    File(PathBuf),
    /// Skipped: not read, reported as a reject saying why.
    Skipped(PathBuf, String),
}

impl Entry {
    fn path(&self) -> &Path {
        match self {
            Entry::File(p) | Entry::Skipped(p, _) => p,
        }
    }
}

fn is_journal_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("txt"))
}

/// Lists the folder, recursively, sorted by path: the journal files to
/// read and the entries skipped (see the module's rule).
pub(crate) fn list(root: &Path) -> Result<Vec<Entry>, IngestError> {
    let mut out = Vec::new();
    walk(root, &mut out)?;
    out.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<Entry>) -> Result<(), IngestError> {
    let io = |source| IngestError::Io {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // The entry itself, a link not followed.
        let ft = entry.file_type().map_err(|source| IngestError::Io {
            path: path.clone(),
            source,
        })?;
        if ft.is_dir() {
            if !tomlite_staging::is_staging_root(&path) {
                walk(&path, out)?;
            }
        } else if ft.is_file() {
            if is_journal_name(&path) {
                out.push(Entry::File(path));
            }
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&path)
                .map(|t| format!(" to {}", t.display()))
                .unwrap_or_default();
            let skip = |why: &str| {
                Entry::Skipped(
                    path.clone(),
                    format!(
                        "a symbolic link{target}{why}: links in a journal folder are not followed; not read (copy the file in instead)"
                    ),
                )
            };
            // Where it leads is only looked at (never opened) to tell a
            // folder or a loop from a link to a file of another name.
            match std::fs::metadata(&path) {
                _ if is_journal_name(&path) => out.push(skip("")),
                Ok(m) if m.is_dir() => out.push(skip(", a folder")),
                Ok(_) => {}
                Err(e) => out.push(skip(&format!(" that cannot be resolved ({e})"))),
            }
        } else if is_journal_name(&path) {
            out.push(Entry::Skipped(
                path.clone(),
                format!("{}, not a regular file; not read", file_kind(&ft)),
            ));
        }
    }
    Ok(())
}

/// The journal files not yet read and the sha256 of each one read, shared
/// by the items and the folder's [`InputDigest`](crate::ingest::InputDigest).
pub(crate) struct DirTally {
    root: PathBuf,
    /// Entries left, in reverse order (the next one last).
    left: Vec<Entry>,
    /// (relative id, sha256) of each file read.
    read: Vec<(String, String)>,
    bytes: u64,
}

/// Lists the folder (sorted, recursive) and streams its journals; the
/// tally gives the folder's sha256 at the end.
pub(crate) fn open(
    root: &Path,
    opts: &IngestOptions,
) -> Result<(Items, Arc<Mutex<DirTally>>), IngestError> {
    let mut left = list(root)?;
    left.reverse();
    let tally = Arc::new(Mutex::new(DirTally {
        root: root.to_path_buf(),
        left,
        read: Vec::new(),
        bytes: 0,
    }));
    let shared = tally.clone();
    let opts = opts.clone();
    let items = std::iter::from_fn(move || {
        let mut t = shared.lock().unwrap_or_else(|p| p.into_inner());
        let entry = t.left.pop()?;
        Some(journal(&mut t, &entry, &opts))
    });
    Ok((Box::new(items), tally))
}

/// The folder's sha256, over the relative path and sha256 of every journal
/// file read; the files the run did not get to are read for it now.
pub(crate) fn finish(tally: &Mutex<DirTally>) -> Result<InputSha, IngestError> {
    let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
    let opts = IngestOptions {
        max_text_bytes: 0,
        journal_persona: None,
    };
    while let Some(entry) = t.left.pop() {
        if let Entry::File(path) = &entry {
            // One that is no longer a regular file is not read, nor hashed.
            let _kept = read_file(&mut t, path, &opts)?;
        }
    }
    let mut files = t.read.clone();
    files.sort();
    let mut h = Tally::default();
    for (name, sha) in files {
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(sha.as_bytes());
        h.update(b"\n");
    }
    Ok(InputSha {
        sha256: h.hex(),
        bytes: t.bytes,
    })
}

/// A journal file read once: at most `limit` bytes kept, every byte hashed.
struct FileRead {
    kept: Vec<u8>,
    len: u64,
    mtime: Option<std::time::SystemTime>,
}

/// Reads one journal file into the tally; `Ok(Err(why))` when it is not a
/// regular file any more (replaced after the folder was listed).
fn read_file(
    t: &mut DirTally,
    path: &Path,
    opts: &IngestOptions,
) -> Result<Result<FileRead, String>, IngestError> {
    let io = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match open_regular(path) {
        Ok(Ok(f)) => f,
        Ok(Err(kind)) => {
            return Ok(Err(format!(
                "{kind}, not a regular file (it was replaced after the folder was listed); not read"
            )));
        }
        Err(e) => return Ok(Err(format!("cannot read file: {e}"))),
    };
    let meta = file.metadata().map_err(io)?;
    let before = Stamp::of(&meta);
    let mut h = Tally::default();
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match file.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Ok(Err(format!("cannot read file: {e}"))),
        };
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        let room = (opts.max_text_bytes + 1).saturating_sub(kept.len() as u64) as usize;
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    let now = Stamp::of(&file.metadata().map_err(io)?);
    if let Some(what) = before.changed(&now) {
        return Err(IngestError::Changed {
            path: path.to_path_buf(),
            what,
        });
    }
    let rel = rel_id(&t.root, path);
    t.bytes += h.bytes_read();
    t.read.push((rel, h.hex()));
    Ok(Ok(FileRead {
        kept,
        len: h.bytes_read(),
        mtime: meta.modified().ok(),
    }))
}

fn rel_parts(root: &Path, path: &Path) -> Vec<String> {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect()
}

fn rel_id(root: &Path, path: &Path) -> String {
    rel_parts(root, path).join("/")
}

fn journal(t: &mut DirTally, entry: &Entry, opts: &IngestOptions) -> Result<Item, IngestError> {
    let path = entry.path();
    let parts = rel_parts(&t.root, path);
    let id = parts.join("/");
    let source = path.display().to_string();
    let reject = |field: Option<&str>, error: String| {
        Ok(Item::Reject(Reject {
            source: source.clone(),
            line: 1,
            record_id: Some(id.clone()),
            field: field.map(str::to_string),
            error,
        }))
    };
    let why = match entry {
        Entry::Skipped(_, why) => return reject(None, why.clone()),
        Entry::File(_) => read_file(t, path, opts)?,
    };
    let read = match why {
        Ok(r) => r,
        Err(why) => return reject(Some("text"), why),
    };
    let persona = if parts.len() > 1 {
        parts[0].clone()
    } else if let Some(p) = &opts.journal_persona {
        p.clone()
    } else {
        return reject(
            Some("persona_id"),
            "journal file is not in a persona folder; put it under <folder>/<persona>/ or pass --journal-persona".into(),
        );
    };
    if read.len > opts.max_text_bytes {
        return reject(
            Some("text"),
            format!(
                "{} bytes, over the limit of {} bytes (rejected, not truncated)",
                read.len, opts.max_text_bytes
            ),
        );
    }
    if let Some(what) = utf16(&read.kept) {
        return reject(Some("text"), what.to_string());
    }
    let mut bytes = read.kept;
    crate::ingest::bytes::strip_utf8_bom(&mut bytes);
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return reject(
                Some("text"),
                format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
            );
        }
    };
    let Some(created_at) = journal_created_at(&text, read.mtime) else {
        return reject(
            Some("created_at"),
            "file has no leading date and no modification time".into(),
        );
    };
    let mut m = Map::new();
    m.insert("id".into(), Value::from(id.clone()));
    m.insert("persona_id".into(), Value::from(persona));
    m.insert("kind".into(), Value::from("journal"));
    m.insert("source_path".into(), Value::from(source.clone()));
    m.insert("created_at".into(), Value::from(created_at));
    m.insert("text".into(), Value::from(text));
    Ok(
        match record_from_map(
            &m,
            Origin {
                source: source.clone(),
                line: 1,
            },
            opts,
        ) {
            Ok(r) => Item::Record(Box::new(r)),
            Err(r) => Item::Reject(r),
        },
    )
}

/// The number of entries a folder's items will be (for progress).
pub(crate) fn count(root: &Path) -> Option<u64> {
    list(root).ok().map(|l| l.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    // A file replaced by a FIFO or a link between the listing and its read
    // is a reject, never opened for reading (a FIFO would block).
    #[test]
    fn a_file_replaced_after_the_listing_is_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let ada = dir.path().join("ada");
        std::fs::create_dir(&ada).unwrap();
        for name in ["a.md", "b.md", "c.md"] {
            std::fs::write(ada.join(name), "2026-11-28 fine.").unwrap();
        }
        let (items, tally) = open(dir.path(), &IngestOptions::default()).unwrap();
        std::fs::remove_file(ada.join("b.md")).unwrap();
        mkfifo(&ada.join("b.md"));
        std::fs::remove_file(ada.join("c.md")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", ada.join("c.md")).unwrap();
        let got: Vec<(String, bool, String)> = items
            .map(|i| match i.unwrap() {
                Item::Record(r) => (r.id, true, String::new()),
                Item::Reject(r) => (r.record_id.unwrap(), false, r.error),
            })
            .collect();
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].0.as_str(), got[0].1), ("ada/a.md", true));
        assert!(
            !got[1].1
                && got[1]
                    .2
                    .starts_with("a FIFO (named pipe), not a regular file (it was replaced"),
            "{got:?}"
        );
        assert!(
            !got[2].1 && got[2].2.starts_with("a symbolic link, not a regular file"),
            "{got:?}"
        );
        // The folder's hash is of the one file read.
        let sha = finish(&tally).unwrap();
        let a = crate::hash::sha256_bytes(b"2026-11-28 fine.");
        assert_eq!(
            sha.sha256,
            crate::hash::sha256_bytes(format!("ada/a.md\0{a}\n").as_bytes())
        );
        assert_eq!(sha.bytes, 16);
    }
}
