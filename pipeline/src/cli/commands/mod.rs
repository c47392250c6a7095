//! One module per subcommand: each takes its resolved settings, opens what
//! it needs, calls the library and hands the human output to `summary`.

pub mod annotate;
pub mod contract;
pub mod curate;
pub mod eval;
pub mod merge;
pub mod parse_annotation;
pub mod policy;
pub mod run;
pub mod train;
pub mod verify;

use std::path::Path;

use tomlite::annotate::classifier::Classifier;
use tomlite::graph::nodes::Registry;
use tomlite::rules::policy::Policy;

use super::settings::ModelSettings;
use crate::Failure;

/// Loads the classifier with the policy's abstention and sensitive content
/// thresholds.
fn load_classifier(model: &ModelSettings, policy: &Policy) -> Result<Classifier, Failure> {
    let mut classifier = Classifier::load_with_adapters(
        &model.model_dir,
        &model.heads_dir,
        model.adapters.as_deref(),
        policy.classifier_policy.abstain_below,
        model.precision,
    )
    .map_err(Failure::config)?;
    let sensitive = &policy.persona_memory_policy.sensitive_content;
    classifier.set_sensitive_thresholds(sensitive.detect.then(|| sensitive.thresholds()));
    Ok(classifier)
}

/// The node registry of `--nodes`, when given; one that cannot be read is a
/// configuration error.
fn load_registry(path: Option<&Path>) -> Result<Option<Registry>, Failure> {
    path.map(|path| Registry::load(path).map_err(Failure::config))
        .transpose()
}
