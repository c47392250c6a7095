//! `tomlite-core`: the library of tomlite, the nightly ToM-lite annotation
//! job for persona-memory records (the tool and its training are the
//! `tomlite` and `tomlite-train` packages).
//!
//! Records (JSONL, Parquet or a folder of journals) stream through
//! [`ingest`] → skip-unchanged → [`annotate`] → [`rules`] → [`stage`], in
//! the order [`run`] drives them. The validator trusts no annotator: every
//! tag and edge is checked against the controlled vocabulary ([`vocab`]),
//! the policy ([`rules::policy`]) and its verbatim quote, and is promoted
//! or quarantined with every reason that applies ([`rules::decide`]).
//! Outputs land in a staging directory committed atomically by the
//! `tomlite-staging` crate. ARCHITECTURE.md maps the folders.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use tomlite_core::annotate::file::FileAnnotator;
//! use tomlite_core::run::{RunConfig, run};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cfg = RunConfig::new(
//!     vec![PathBuf::from("data/sample/records.jsonl")],
//!     PathBuf::from("staging-out"),
//!     tomlite_core::rules::policy::Policy::default(),
//! );
//! // Stop taking records after an hour; the next run takes the rest.
//! cfg.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(3600));
//! let mut annotator = FileAnnotator::open("data/sample/annotations.jsonl".as_ref())?;
//! let summary = run(&cfg, &mut annotator)?;
//! println!("{} promoted tags", summary.counts.promoted_tags);
//! # Ok(()) }
//! ```

pub mod annotate;
pub mod curate;
pub mod graph;
pub mod hash;
pub mod ingest;
pub mod report;
pub mod rules;
pub mod run;
pub mod segment;
pub mod stage;
pub mod vocab;
