//! The sensitive model (head, lexical model and figures) kept in the
//! training cache between runs. It depends on the encoder, the sensitivity
//! data, the ordinary memories it reads as negatives and the training
//! code, never on the curated decisions; its five-fold cross-validation is
//! most of a refit's time. A refit with new decisions (`train --curated`)
//! that changes none of these reads it back instead of training it again.
//!
//! The key hashes the running executable's bytes with the inputs, so a
//! build with different training code never reads an entry written by
//! another one.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tomlite_models::Encoder;
use tomlite_models::data::SensitivityRecord;
use tomlite_models::heads::{HeadSpec, TrainOptions, load_head_file, save_head_file};

use crate::error::LearnError;
use crate::sensitive::Trained;

/// What the sensitive model is trained from, besides the cache folder.
pub(super) struct Inputs<'a> {
    pub(super) encoder: &'a Encoder,
    pub(super) records: &'a [SensitivityRecord],
    pub(super) negatives: &'a [&'a str],
    /// Whether only the records the encoder never saw set the temperature.
    pub(super) tunes_encoder: bool,
    pub(super) source: &'a str,
    pub(super) opts: &'a TrainOptions,
}

/// A cache entry's two files: the tensors and the JSON beside them.
pub(super) struct Entry {
    tensors: PathBuf,
    json: PathBuf,
}

/// The entry for `inputs` in `dir`; `None` when the executable cannot be
/// read (nothing is cached then).
pub(super) fn entry(dir: &Path, inputs: &Inputs<'_>) -> Option<Entry> {
    let key = key(&executable_sha256()?, inputs);
    Some(Entry {
        tensors: dir.join(format!("sensitive-{key}.safetensors")),
        json: dir.join(format!("sensitive-{key}.json")),
    })
}

/// sha256 of the running executable.
fn executable_sha256() -> Option<String> {
    tomlite_core::hash::sha256_file(&std::env::current_exe().ok()?).ok()
}

/// The entry's key: the executable and every input, length-prefixed.
fn key(executable: &str, inputs: &Inputs<'_>) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"sensitive-v1");
    field(executable.as_bytes());
    field(inputs.encoder.sha256().as_bytes());
    field(inputs.encoder.adapters_sha256().unwrap_or("").as_bytes());
    field(&[u8::from(inputs.tunes_encoder)]);
    field(inputs.source.as_bytes());
    field(format!("{:?}", inputs.opts).as_bytes());
    field(&(inputs.records.len() as u64).to_le_bytes());
    for r in inputs.records {
        field(r.id.as_bytes());
        field(r.text.as_bytes());
        field(r.style.as_deref().unwrap_or("").as_bytes());
        field(format!("{:?}", r.sensitivity).as_bytes());
    }
    field(&(inputs.negatives.len() as u64).to_le_bytes());
    for t in inputs.negatives {
        field(t.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The cached model, or `None` when the entry is absent or unreadable
/// (then it is trained again and rewritten).
pub(super) fn read(entry: &Entry) -> Option<Trained> {
    let meta: Value = serde_json::from_slice(&std::fs::read(&entry.json).ok()?).ok()?;
    let spec: HeadSpec = serde_json::from_value(meta["spec"].clone()).ok()?;
    let temperature = meta["temperature"].as_f64()?;
    let (head, lexical) = load_head_file(&entry.tensors, spec, temperature).ok()?;
    Some(Trained {
        head,
        lexical: lexical?,
        metrics: meta["metrics"].clone(),
    })
}

/// Stores `trained`: the tensors first, then the JSON, each through a
/// temporary file renamed into place, so a reader sees a whole entry or
/// none.
pub(super) fn write(dir: &Path, entry: &Entry, trained: &Trained) -> Result<(), LearnError> {
    std::fs::create_dir_all(dir).map_err(|source| LearnError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let tmp = entry.tensors.with_extension("safetensors.tmp");
    save_head_file(&tmp, &trained.head, Some(&trained.lexical))?;
    rename(&tmp, &entry.tensors)?;
    let meta = json!({
        "spec": trained.head.spec,
        "temperature": trained.head.temperature,
        "metrics": trained.metrics,
    });
    let tmp = entry.json.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    std::fs::write(&tmp, text).map_err(|source| LearnError::Io {
        path: tmp.clone(),
        source,
    })?;
    rename(&tmp, &entry.json)
}

fn rename(from: &Path, to: &Path) -> Result<(), LearnError> {
    std::fs::rename(from, to).map_err(|source| LearnError::Io {
        path: to.to_path_buf(),
        source,
    })
}

/// The entry's tensor file, for progress lines.
impl Entry {
    pub(super) fn path(&self) -> &Path {
        &self.tensors
    }
}
