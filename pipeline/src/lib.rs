//! `tomlite`: the nightly ToM-lite annotation job for persona-memory records.
//!
//! Records (JSONL, Parquet or a folder of journals) stream through
//! ingest → skip-unchanged → annotate → validate/decide → stage. The
//! validator trusts no annotator: every tag and edge is checked against the
//! controlled vocabulary ([`vocab`]), the policy ([`policy`]) and its
//! verbatim quote, and is promoted or quarantined with every reason that
//! applies ([`decide`]). Outputs land in a staging directory committed
//! atomically by the `tomlite-staging` crate.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use tomlite::annotation::FileAnnotator;
//! use tomlite::run::{RunConfig, run};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cfg = RunConfig::new(
//!     vec![PathBuf::from("data/sample/records.jsonl")],
//!     PathBuf::from("staging-out"),
//!     tomlite::policy::Policy::default(),
//! );
//! // Stop taking records after an hour; the next run takes the rest.
//! cfg.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(3600));
//! let mut annotator = FileAnnotator::open("data/sample/annotations.jsonl".as_ref())?;
//! let summary = run(&cfg, &mut annotator)?;
//! println!("{} promoted tags", summary.counts.promoted_tags);
//! # Ok(()) }
//! ```

pub mod annotation;
pub mod classifier;
pub mod contract;
pub mod curate;
pub mod decide;
pub mod edge_model;
pub mod events;
pub mod failed;
mod journals;
pub mod learn;
pub mod memory;
pub mod mentions;
pub mod merge;
pub mod nodes;
mod parquet_in;
pub mod policy;
pub mod progress;
pub mod record;
pub mod report;
pub mod run;
pub mod segment;
pub mod sensitive;
pub mod sensitive_rules;
pub mod tables;
pub mod verdict;
pub mod verify;
pub mod vocab;

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// sha256 of bytes, hex.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// sha256 of a folder: its regular files' relative paths and sha256s,
/// sorted (links, FIFOs and devices are neither followed nor read).
pub fn sha256_dir(dir: &Path) -> std::io::Result<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let ft = entry.file_type()?;
            if ft.is_dir() {
                walk(root, &path, out)?;
            } else if ft.is_file() {
                let rel = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                out.push((rel, sha256_file(&path)?));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort();
    let mut h = Sha256::new();
    for (name, sha) in files {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sha.as_bytes());
        h.update([b'\n']);
    }
    Ok(hex::encode(h.finalize()))
}
