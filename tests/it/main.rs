//! End-to-end tests of the `tomlite` binary: real command line, real files
//! in temp dirs, outputs read back and checked by content.

mod bad_input;
mod classifier;
mod common;
mod contract;
mod curate;
mod decisions;
mod edges;
mod finetune;
mod fuzz_corpus;
mod ingest;
mod inputs;
mod layout;
#[cfg(feature = "failpoints")]
mod ops;
mod outputs;
mod policy;
mod registry;
mod sample;
mod sensitive;
mod snapshots;
mod staging;
#[cfg(feature = "failpoints")]
mod stall;
mod training_data;
mod verdict;
mod verify;
