//! `tomlite verify`: re-checks run files against their sealed receipts.

use anyhow::anyhow;
use tomlite::stage::verify::Verification;

use crate::cli::settings::{VerifySettings, VerifyTarget};
use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Verifies one run or a whole staging directory; any difference exits 1.
pub fn verify(settings: VerifySettings) -> Result<(), Failure> {
    let verification = match &settings.target {
        VerifyTarget::Run(dir) => Verification {
            staging: None,
            runs: vec![tomlite::stage::verify::verify_run(dir)],
            differences: Vec::new(),
            not_checked: Vec::new(),
        },
        VerifyTarget::Staging(root) => {
            tomlite::stage::verify::verify_staging(root).map_err(Failure::config)?
        }
    };
    if settings.json {
        let mut out = serde_json::to_value(&verification).unwrap_or_default();
        out["ok"] = serde_json::json!(verification.ok());
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        summary::print_verification(&verification);
    }
    if verification.ok() {
        return Ok(());
    }
    let differing_runs = verification
        .runs
        .iter()
        .filter(|run| !run.differences.is_empty())
        .count();
    Err(Failure {
        status: ExitStatus::Failed,
        error: anyhow!(
            "verify: {} differences ({differing_runs} of {} runs, {} in the staging directory's list of runs)",
            verification.all_differences().count(),
            verification.runs.len(),
            verification.differences.len()
        ),
    })
}
