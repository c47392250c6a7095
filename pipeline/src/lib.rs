//! `tomlite`: the nightly ToM-lite annotation job for persona-memory records.
//!
//! This package is the command-line tool (`main.rs` and `cli/`). Its library
//! re-exports the pipeline ([`tomlite_core`]: `tomlite::run`,
//! `tomlite::rules`, …) so that the tool, the integration tests, the
//! benchmarks and the fuzz targets name one crate, and training
//! ([`tomlite_train`]) as `tomlite::train`. ARCHITECTURE.md maps the
//! folders.

pub use tomlite_core::*;
pub use tomlite_train as train;
