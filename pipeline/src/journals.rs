//! A folder of `.md`/`.txt` journals: one record per file.
//!
//! The id is the file's path relative to the folder (`ada/2026-11-28.md`),
//! the persona is the first folder under the root (`ada`) or
//! `--journal-persona` for files at the root, `created_at` is the date the
//! file starts with, else its modification time.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::record::{
    IngestError, IngestOptions, Item, Items, Origin, Reject, journal_created_at, read_all,
    record_from_map,
};

/// Lists the folder (sorted, recursive) and streams its journals.
pub fn open(root: &Path, opts: &IngestOptions) -> Result<Items, IngestError> {
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    let root = root.to_path_buf();
    let opts = opts.clone();
    Ok(Box::new(
        files
            .into_iter()
            .map(move |path| Ok(journal(&root, &path, &opts))),
    ))
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), IngestError> {
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
        let ft = entry.file_type().map_err(io)?;
        if ft.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("txt"))
        {
            out.push(path);
        }
    }
    Ok(())
}

fn journal(root: &Path, path: &Path, opts: &IngestOptions) -> Item {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let id = parts.join("/");
    let source = path.display().to_string();
    let reject = |field: &str, error: String| {
        Item::Reject(Reject {
            source: source.clone(),
            line: 1,
            record_id: Some(id.clone()),
            field: Some(field.to_string()),
            error,
        })
    };
    let persona = if parts.len() > 1 {
        parts[0].clone()
    } else if let Some(p) = &opts.journal_persona {
        p.clone()
    } else {
        return reject(
            "persona_id",
            "journal file is not in a persona folder; put it under <folder>/<persona>/ or pass --journal-persona".into(),
        );
    };
    let (bytes, over) = match read_all(path, opts.max_text_bytes) {
        Ok(x) => x,
        Err(e) => return reject("text", format!("cannot read file: {e}")),
    };
    if over {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        return reject(
            "text",
            format!(
                "{len} bytes, over the limit of {} bytes (rejected, not truncated)",
                opts.max_text_bytes
            ),
        );
    }
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return reject(
                "text",
                format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
            );
        }
    };
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(created_at) = journal_created_at(&text, mtime) else {
        return reject(
            "created_at",
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
    }
}
