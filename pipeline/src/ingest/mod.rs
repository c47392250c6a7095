//! Reading records: the record types, JSONL, Parquet and journal folders,
//! each input hashed as it is read.

pub mod journals;
pub mod parquet;
pub mod record;
