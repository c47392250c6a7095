//! The promotion policy: `tomlite.yaml`, whose blocks use the seed's own keys
//! (`tom_lite`, `tom_lite_promotion_policy`, `classifier_policy`) so the
//! seed's YAML pastes in unchanged, plus a `run` block for the job itself.
//!
//! Every key is optional and defaults to the seed's value, so no file at all
//! behaves exactly as the seed says. Unknown keys, numbers outside their
//! range and labels outside the vocabulary are configuration errors that
//! name the key's path.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::decide::Reason;
use crate::vocab::{AFFECTS, Field, INTENSITIES, TOM_KINDS};

/// The effective policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// The seed's `tom_lite` block.
    pub tom_lite: TomLite,
    /// The seed's `tom_lite_promotion_policy` block.
    pub tom_lite_promotion_policy: PromotionPolicy,
    /// The seed's `classifier_policy` block.
    pub classifier_policy: ClassifierPolicy,
    /// The job's own settings.
    pub run: RunPolicy,
}

/// `tom_lite`: the controlled vocabulary and per-memory limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TomLite {
    /// Must be true: the vocabulary is closed.
    pub controlled_vocabulary: bool,
    /// Must be `denied`.
    pub freeform_tom_tags: String,
    /// Most tom_kind tags one record may carry (seed: 2).
    pub max_tom_kinds_per_memory: u32,
    /// Most affect labels one record may carry (seed: 1).
    pub max_affect_labels_per_memory: u32,
    /// Every tag and edge needs a verbatim source quote (seed: true).
    pub require_source_anchor: bool,
    /// Accepted tom_kinds: the seed's eight, or a subset.
    pub tom_kind: Vec<String>,
    /// Accepted affects: the seed's six, or a subset.
    pub affect: Vec<String>,
    /// Accepted intensities: the seed's four, or a subset.
    pub intensity: Vec<String>,
}

/// `tom_lite_promotion_policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromotionPolicy {
    /// When a tag is promoted.
    pub promote_tags_when: PromoteTags,
    /// When an edge is promoted.
    pub promote_edges_when: PromoteEdges,
    /// The quarantine reasons; must name every reason of the seed.
    pub quarantine_when: Vec<String>,
}

/// `promote_tags_when`: all minimums are inclusive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromoteTags {
    /// Minimum tom_kind confidence (seed: 0.80).
    pub tom_kind_confidence_min: f64,
    /// Minimum affect confidence (seed: 0.70).
    pub affect_confidence_min: f64,
    /// Minimum intensity confidence (seed: 0.65).
    pub intensity_confidence_min: f64,
    /// A verbatim quote is required (seed: true).
    pub source_quote_required: bool,
}

/// `promote_edges_when`: the minimum is inclusive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromoteEdges {
    /// Minimum edge confidence (seed: 0.85).
    pub edge_confidence_min: f64,
    /// A verbatim quote is required (seed: true).
    pub source_quote_required: bool,
    /// Source and target must be registry nodes or input memories (seed: true).
    pub both_nodes_must_exist: bool,
    /// Must be true: edge keys are always computed by the job.
    pub deterministic_edge_key_required: bool,
    /// Most edge candidates one record may carry (seed: 2).
    pub max_edges_per_record: u32,
}

/// `classifier_policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierPolicy {
    /// The classifier is optional (another annotator may be used).
    pub optional: bool,
    /// Must be true: the model only suggests.
    pub output_is_advisory: bool,
    /// Must be `abstain`.
    pub weak_classification_action: String,
    /// The classifier may suggest labels.
    pub local_llm_or_classifier_may_suggest: bool,
    /// Must be true: durable writes need a curator.
    pub durable_memory_write_requires_curator_or_project_agent: bool,
    /// The local classifier tags nothing (abstains) when its best tom_kind's
    /// calibrated probability is under this (default 0.5: it tags a kind only
    /// when the record more likely than not carries it).
    pub abstain_below: f64,
}

/// `run`: settings of the job, not of the seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunPolicy {
    /// Staging directory used when `--staging` is not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staging: Option<PathBuf>,
    /// Longest accepted record text, in bytes (default 32 KiB).
    pub max_text_bytes: u64,
}

fn strings(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

impl Default for TomLite {
    fn default() -> Self {
        Self {
            controlled_vocabulary: true,
            freeform_tom_tags: "denied".into(),
            max_tom_kinds_per_memory: 2,
            max_affect_labels_per_memory: 1,
            require_source_anchor: true,
            tom_kind: strings(&TOM_KINDS),
            affect: strings(&AFFECTS),
            intensity: strings(&INTENSITIES),
        }
    }
}

impl Default for PromotionPolicy {
    fn default() -> Self {
        Self {
            promote_tags_when: PromoteTags::default(),
            promote_edges_when: PromoteEdges::default(),
            quarantine_when: Reason::SEED
                .iter()
                .map(|r| r.as_str().to_string())
                .collect(),
        }
    }
}

impl Default for PromoteTags {
    fn default() -> Self {
        Self {
            tom_kind_confidence_min: 0.80,
            affect_confidence_min: 0.70,
            intensity_confidence_min: 0.65,
            source_quote_required: true,
        }
    }
}

impl Default for PromoteEdges {
    fn default() -> Self {
        Self {
            edge_confidence_min: 0.85,
            source_quote_required: true,
            both_nodes_must_exist: true,
            deterministic_edge_key_required: true,
            max_edges_per_record: 2,
        }
    }
}

impl Default for ClassifierPolicy {
    fn default() -> Self {
        Self {
            optional: true,
            output_is_advisory: true,
            weak_classification_action: "abstain".into(),
            local_llm_or_classifier_may_suggest: true,
            durable_memory_write_requires_curator_or_project_agent: true,
            abstain_below: 0.5,
        }
    }
}

impl Default for RunPolicy {
    fn default() -> Self {
        Self {
            staging: None,
            max_text_bytes: 32 * 1024,
        }
    }
}

/// A policy that cannot be used; the message names the key's path.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML.
    #[error("policy file {} is not valid YAML: {message}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A key is unknown or a value has the wrong type or range.
    #[error("policy file {}: {key}: {message}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// The key's dotted path, e.g. `tom_lite_promotion_policy.promote_tags_when.tom_kind_confidence_min`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

impl Policy {
    /// Reads and checks a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&text, path)
    }

    /// Parses and checks policy YAML; `path` is only used in messages.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Self, PolicyError> {
        // YAML to a generic tree first, then the tree to the typed policy
        // through serde_path_to_error, so that every error knows its key path.
        let tree: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Yaml {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?
        };
        let tree = if tree.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            tree
        };
        let policy: Policy = serde_path_to_error::deserialize(tree).map_err(|e| {
            let key = e.path().to_string();
            let message = e.inner().to_string();
            PolicyError::Key {
                path: path.to_path_buf(),
                key: if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                message,
            }
        })?;
        policy.check().map_err(|(key, message)| PolicyError::Key {
            path: path.to_path_buf(),
            key,
            message,
        })?;
        Ok(policy)
    }

    /// Checks ranges, fixed values and vocabularies; returns (key path, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        let t = &self.tom_lite;
        if !t.controlled_vocabulary {
            return err(
                "tom_lite.controlled_vocabulary",
                "must be true: the vocabulary is closed".into(),
            );
        }
        if t.freeform_tom_tags != "denied" {
            return err(
                "tom_lite.freeform_tom_tags",
                format!("must be `denied`, found `{}`", t.freeform_tom_tags),
            );
        }
        if !(1..=8).contains(&t.max_tom_kinds_per_memory) {
            return err(
                "tom_lite.max_tom_kinds_per_memory",
                format!("{} is outside [1, 8]", t.max_tom_kinds_per_memory),
            );
        }
        if t.max_affect_labels_per_memory != 1 {
            return err(
                "tom_lite.max_affect_labels_per_memory",
                format!(
                    "must be 1 (one affect per record), found {}",
                    t.max_affect_labels_per_memory
                ),
            );
        }
        for (key, list, field) in [
            ("tom_lite.tom_kind", &t.tom_kind, Field::TomKind),
            ("tom_lite.affect", &t.affect, Field::Affect),
            ("tom_lite.intensity", &t.intensity, Field::Intensity),
        ] {
            if list.is_empty() {
                return err(key, "must name at least one label".into());
            }
            for (i, label) in list.iter().enumerate() {
                if !field.contains(label) {
                    return err(
                        &format!("{key}[{i}]"),
                        format!(
                            "`{label}` is not in the ToM-lite {} vocabulary ({})",
                            field.name(),
                            field.labels().join(", ")
                        ),
                    );
                }
            }
        }
        let p = &self.tom_lite_promotion_policy;
        for (key, v) in [
            (
                "tom_lite_promotion_policy.promote_tags_when.tom_kind_confidence_min",
                p.promote_tags_when.tom_kind_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.affect_confidence_min",
                p.promote_tags_when.affect_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.intensity_confidence_min",
                p.promote_tags_when.intensity_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_edges_when.edge_confidence_min",
                p.promote_edges_when.edge_confidence_min,
            ),
            (
                "classifier_policy.abstain_below",
                self.classifier_policy.abstain_below,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return err(key, format!("{v} is outside [0, 1]"));
            }
        }
        if !p.promote_edges_when.deterministic_edge_key_required {
            return err(
                "tom_lite_promotion_policy.promote_edges_when.deterministic_edge_key_required",
                "must be true: edge keys are always derived from (source, relation, target)".into(),
            );
        }
        for (i, r) in p.quarantine_when.iter().enumerate() {
            if Reason::parse(r).is_none() {
                return err(
                    &format!("tom_lite_promotion_policy.quarantine_when[{i}]"),
                    format!(
                        "`{r}` is not a quarantine reason ({})",
                        Reason::ALL
                            .iter()
                            .map(|r| r.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        for r in Reason::SEED {
            if !p.quarantine_when.iter().any(|x| x == r.as_str()) {
                return err(
                    "tom_lite_promotion_policy.quarantine_when",
                    format!(
                        "must list `{}`: a run never promotes what the seed quarantines",
                        r.as_str()
                    ),
                );
            }
        }
        let c = &self.classifier_policy;
        if !c.output_is_advisory {
            return err(
                "classifier_policy.output_is_advisory",
                "must be true: the model only suggests".into(),
            );
        }
        if c.weak_classification_action != "abstain" {
            return err(
                "classifier_policy.weak_classification_action",
                format!(
                    "must be `abstain`, found `{}`",
                    c.weak_classification_action
                ),
            );
        }
        if !c.durable_memory_write_requires_curator_or_project_agent {
            return err(
                "classifier_policy.durable_memory_write_requires_curator_or_project_agent",
                "must be true: the job only stages, a curator promotes durably".into(),
            );
        }
        if self.run.max_text_bytes == 0 {
            return err("run.max_text_bytes", "must be positive".into());
        }
        Ok(())
    }

    /// The policy as canonical JSON (fixed key order), the input of [`Policy::sha256`].
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("a policy always serialises")
    }

    /// sha256 of the effective policy; goes into every receipt and the state.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
    }

    /// The effective policy as YAML, ready to paste into `tomlite.yaml`.
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(self).expect("a policy always serialises")
    }

    /// Whether a label is accepted for a field under this policy.
    pub fn accepts(&self, field: Field, label: &str) -> bool {
        let list = match field {
            Field::TomKind => &self.tom_lite.tom_kind,
            Field::Affect => &self.tom_lite.affect,
            Field::Intensity => &self.tom_lite.intensity,
        };
        list.iter().any(|l| l == label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<Policy, PolicyError> {
        Policy::from_yaml(y, Path::new("t.yaml"))
    }

    #[test]
    fn empty_file_is_the_seed_policy() {
        assert_eq!(parse("").unwrap(), Policy::default());
    }

    #[test]
    fn the_seeds_blocks_paste_in_unchanged() {
        let y = r#"
tom_lite_promotion_policy:
  promote_tags_when:
    tom_kind_confidence_min: 0.80
    affect_confidence_min: 0.70
    intensity_confidence_min: 0.65
    source_quote_required: true

  promote_edges_when:
    edge_confidence_min: 0.85
    source_quote_required: true
    both_nodes_must_exist: true
    deterministic_edge_key_required: true
    max_edges_per_record: 2

  quarantine_when:
    - confidence_below_threshold
    - source_quote_missing
    - unknown_target_node
    - more_than_two_edge_candidates
    - freeform_tom_label
    - sensitive_boundary_or_safety_record
classifier_policy:
    optional: true
    output_is_advisory: true
    weak_classification_action: abstain
    local_llm_or_classifier_may_suggest: true
    durable_memory_write_requires_curator_or_project_agent: true
"#;
        assert_eq!(parse(y).unwrap(), Policy::default());
    }

    #[test]
    fn unknown_key_is_named_with_its_path() {
        let e = parse("tom_lite_promotion_policy:\n  promote_tags_when:\n    tom_kind_min: 0.5\n")
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("tom_lite_promotion_policy.promote_tags_when"),
            "{m}"
        );
        assert!(m.contains("tom_kind_min"), "{m}");
    }

    #[test]
    fn out_of_range_threshold_is_named() {
        let e = parse(
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    edge_confidence_min: 1.2\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("tom_lite_promotion_policy.promote_edges_when.edge_confidence_min: 1.2 is outside [0, 1]"),
            "{e}"
        );
    }

    #[test]
    fn label_outside_vocabulary_is_named_with_its_index() {
        let e = parse("tom_lite:\n  affect: [angry, furious]\n").unwrap_err();
        assert!(e.to_string().contains("tom_lite.affect[1]"), "{e}");
    }

    #[test]
    fn wrong_type_is_named() {
        let e = parse("tom_lite:\n  max_tom_kinds_per_memory: two\n").unwrap_err();
        assert!(
            e.to_string().contains("tom_lite.max_tom_kinds_per_memory"),
            "{e}"
        );
    }

    #[test]
    fn hash_changes_with_any_value_and_round_trips_through_yaml() {
        let a = Policy::default();
        let mut b = Policy::default();
        b.tom_lite_promotion_policy
            .promote_tags_when
            .tom_kind_confidence_min = 0.81;
        assert_ne!(a.sha256(), b.sha256());
        let back = parse(&b.to_yaml()).unwrap();
        assert_eq!(back.sha256(), b.sha256());
    }
}
