//! Fuzzing support for tomlite: the invariants the record parser must keep
//! on any input. The fuzz target and the stable corpus replay test
//! (`tests/it/fuzz_corpus.rs`, which includes `invariants.rs` by path) check
//! the same ones.

#[path = "invariants.rs"]
pub mod invariants;
