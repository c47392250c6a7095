//! What a run stages: the typed Parquet tables (written and read back) and
//! the sealed receipt, and the check that a committed run's files still
//! match it.

pub mod cells;
pub mod read;
pub mod receipt;
pub mod tables;
pub mod verify;
