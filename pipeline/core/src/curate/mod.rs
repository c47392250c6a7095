//! The curator's decisions: `tomlite curate apply` and `tomlite curate status`.
//!
//! A decision names a quarantined item of a committed run (`run_id`,
//! `item_id`) and says `accept`, `reject` or `relabel` (to a tom_kind, or an
//! edge to a registry node). Applied decisions live in
//! `<staging>/curated/curated.parquet`, one row per item (the latest
//! decision wins), replaced atomically under the staging lock. Each row
//! keeps the record's text, the quote and the record's fingerprint, so it is
//! a labeled example for `tomlite train --curated` and, while the record is
//! unchanged, later runs do not queue the same item again.

mod apply;
mod curated;
mod quote;
mod status;

pub use apply::run_registry;
pub use apply::{MAX_DECISION_LINE, apply};
pub use curated::*;
pub use status::status;
