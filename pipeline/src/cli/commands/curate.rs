//! `tomlite curate apply` and `tomlite curate status`: the curator's
//! decisions applied to a staging directory, and what is pending.

use anyhow::anyhow;
use tomlite::curate::CurateError;

use super::load_registry;
use crate::cli::settings::{CurateApplySettings, CurateStatusSettings};
use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// A run holding the staging directory exits 3, an unreadable registry 2,
/// anything else 1.
fn curate_failure(error: CurateError) -> Failure {
    match error {
        CurateError::Staging(locked @ tomlite_staging::Error::Locked { .. }) => Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(locked)
                .context("a run holds the staging directory; nothing was applied"),
        },
        CurateError::Nodes(error) => Failure::config(error),
        error => Failure {
            status: ExitStatus::Failed,
            error: error.into(),
        },
    }
}

/// Applies the decisions file; lines that cannot be applied make it exit 1
/// (the valid ones are applied).
pub fn apply(settings: CurateApplySettings) -> Result<(), Failure> {
    let registry = load_registry(settings.nodes.as_deref())?;
    let report = tomlite::curate::apply(&settings.staging, &settings.decisions, registry.as_ref())
        .map_err(curate_failure)?;
    if settings.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        summary::print_curate_apply(&settings.decisions, &report);
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow!(
                "{} decision lines were not applied (the valid ones were)",
                report.errors.len()
            ),
        })
    }
}

/// Prints what is pending, decided and applied.
pub fn status(settings: CurateStatusSettings) -> Result<(), Failure> {
    let curate_status = tomlite::curate::status(&settings.staging, settings.decisions.as_deref())
        .map_err(curate_failure)?;
    if settings.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&curate_status).unwrap_or_default()
        );
    } else {
        summary::print_curate_status(&settings.staging, &curate_status);
    }
    Ok(())
}
