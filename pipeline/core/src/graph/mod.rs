//! The graph side of a record: the node registry, the names that link a
//! record to nodes, and the index of committed memories.

pub mod memory;
pub mod mentions;
pub mod nodes;
