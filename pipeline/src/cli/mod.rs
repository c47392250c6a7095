//! The binary's modules: clap definitions (`args`), their resolution into
//! settings, one module per command, and the human output.

pub mod args;
pub mod commands;
pub mod settings;
pub mod stdout;
pub mod summary;
