//! `tomlite merge`: joins complete shard runs into one committed run.

use tomlite::run::merge::MergeError;

use super::load_registry;
use crate::cli::settings::MergeSettings;
use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Merges the shard runs and prints the merged run's summary.
pub fn merge(settings: MergeSettings) -> Result<(), Failure> {
    let registry = load_registry(settings.nodes.as_deref())?;
    let merged = tomlite::run::merge::merge(
        &settings.runs,
        &settings.staging,
        &settings.policy,
        registry.as_ref(),
    )
    .map_err(merge_failure)?;
    if settings.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&merged).unwrap_or_default()
        );
    } else {
        summary::print_run_summary(&merged);
    }
    Ok(())
}

/// A held lock exits 3, shard runs that cannot be merged 2, any other
/// failure 1.
fn merge_failure(error: MergeError) -> Failure {
    match error {
        MergeError::Staging(locked @ tomlite_staging::Error::Locked { .. }) => Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(locked)
                .context("another run holds the target staging directory"),
        },
        refused @ MergeError::Refused { .. } => Failure::config(refused),
        error => Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(error).context("merge failed; nothing was committed"),
        },
    }
}
