//! `tomlite contract lint` and `tomlite contract schema`: subagent
//! contracts checked against the seed's lint rules, and their JSON Schema.

use std::path::PathBuf;

use anyhow::anyhow;
use tomlite_contract::Severity;

use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Lints the contract files; any error exits 1.
pub fn lint(files: &[PathBuf], json: bool) -> Result<(), Failure> {
    let findings: Vec<_> = files
        .iter()
        .flat_map(|file| tomlite_contract::lint_file(file))
        .collect();
    let errors = findings
        .iter()
        .filter(|finding| finding.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "files": files.len(),
                "errors": errors,
                "warnings": warnings,
                "findings": findings,
            }))
            .unwrap_or_default()
        );
    } else {
        summary::print_lint(files.len(), &findings, errors, warnings);
    }
    if errors == 0 {
        Ok(())
    } else {
        Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow!("{errors} contract lint errors"),
        })
    }
}

/// Prints the JSON Schema of a subagent contract.
pub fn schema() -> Result<(), Failure> {
    println!(
        "{}",
        serde_json::to_string_pretty(&tomlite_contract::schema()).unwrap_or_default()
    );
    Ok(())
}
