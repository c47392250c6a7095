//! Run ids: `YYYYMMDDTHHMMSSZ-xxxx`, sortable by time to the second and
//! unique among the committed runs, the temporary ones and the records of
//! failed runs.

use std::path::{Path, PathBuf};

/// The folder of the staging directory that keeps failed and blocked runs.
pub const FAILED_DIR: &str = "failed";

/// `YYYYMMDDTHHMMSSZ-xxxx`: unique in the staging directory, and sortable by
/// time to the second (two runs in one second sort by their random suffix;
/// `LATEST` and the state, not the names, say which came last).
pub fn new_run_id(runs: &Path, now: chrono::DateTime<chrono::Utc>) -> String {
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let salt = (std::process::id() as u64) ^ u64::from(now.timestamp_subsec_nanos());
    for bump in 0.. {
        let id = format!("{stamp}-{:04x}", (salt + bump) & 0xffff);
        // Any entry counts, a dangling link included; so does a failed
        // run's record of the same id.
        let taken = |p: PathBuf| std::fs::symlink_metadata(p).is_ok();
        if !taken(runs.join(&id))
            && !taken(runs.join(format!("{}{id}", tomlite_staging::TMP_PREFIX)))
            && !runs
                .parent()
                .is_some_and(|root| taken(root.join(FAILED_DIR).join(&id)))
        {
            return id;
        }
    }
    unreachable!("some suffix is free")
}
