//! The promotion rules: the quarantine reasons, the policy file and the
//! decision that promotes or quarantines every tag and edge.

pub mod decide;
pub mod policy;
pub mod reason;
