//! `tomlite eval`: the classifier measured on labeled records, a GoEmotions
//! split and/or the sensitive content records.

use tomlite_train::LearnError;

use super::{load_classifier, load_registry};
use crate::cli::settings::EvalSettings;
use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Evaluates every set given and prints the measures.
pub fn eval(settings: EvalSettings) -> Result<(), Failure> {
    let registry = load_registry(settings.nodes.as_deref())?;
    let mut classifier = load_classifier(&settings.model, &settings.policy)?;
    let failed = |error: LearnError| Failure {
        status: ExitStatus::Failed,
        error: error.into(),
    };
    let mut sets = Vec::new();
    if !settings.data.is_empty() {
        sets.push(
            tomlite_train::eval_records(
                &mut classifier,
                &settings.data,
                &settings.policy,
                settings.dev,
                registry.as_ref(),
            )
            .map_err(failed)?,
        );
    }
    if let Some(split) = &settings.goemotions {
        sets.push(tomlite_train::eval_goemotions(&mut classifier, split).map_err(failed)?);
    }
    if !settings.sensitivity.is_empty() {
        sets.push(
            tomlite_train::sensitive::eval(&mut classifier, &settings.sensitivity, settings.dev)
                .map_err(failed)?,
        );
    }
    if settings.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&sets).unwrap_or_default()
        );
    } else {
        summary::print_eval(&sets);
    }
    Ok(())
}
