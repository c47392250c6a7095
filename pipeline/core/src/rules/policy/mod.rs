//! The promotion policy: `tomlite.yaml`, in the seed's own layout
//! (`persona_memory_policy:` holding `tom_lite`, `graph_policy`,
//! `intensity_policy` and `classifier_policy`; `tom_lite_promotion_policy:`
//! beside it) so the seed's YAML pastes in unchanged, plus a `run` block for
//! the job itself. `tom_lite` and `classifier_policy` may also stand at the
//! top level (the earlier layout). `persona_memory_policy.sensitive_content`
//! (not in the seed; in its style) says what a detection of sensitive
//! content in a record does.
//!
//! Every key is optional and defaults to the seed's value, so no file at all
//! behaves exactly as the seed says. A policy may make the seed's rules
//! stricter, never switch one off: unknown keys, numbers outside their
//! range, labels outside the vocabulary, a seed rule set to false and a key
//! of the memory service set to anything but the seed's value are
//! configuration errors that name the key's path.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::rules::reason::Reason;
use crate::vocab::{AFFECTS, Field, INTENSITIES, SENSITIVE_CATEGORIES, TOM_KINDS};

mod check;
mod file;

/// The effective policy. Its canonical JSON, and so its sha256, holds the
/// keys that can vary; the memory service's keys (`graph_policy`,
/// `intensity_policy`, the persona block's own keys) accept only the seed's
/// values and are not stored.
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
    /// The keys of `persona_memory_policy` that can vary (beyond `tom_lite`
    /// and `classifier_policy`, kept above for the earlier layout).
    pub persona_memory_policy: PersonaMemoryPolicy,
}

/// `persona_memory_policy`: its keys that can vary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PersonaMemoryPolicy {
    /// What a detection of sensitive content does.
    pub sensitive_content: SensitiveContent,
}

/// `persona_memory_policy.sensitive_content`: a record in which the
/// annotator detected sensitive content (its annotation's `sensitive`) has
/// every tag and edge quarantined `sensitive_boundary_or_safety_record`.
/// A producer's flag (`sensitive`, `safety`) quarantines whatever this says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SensitiveContent {
    /// Detections count (default true). False: an annotation's `sensitive`
    /// is ignored; flags still quarantine.
    pub detect: bool,
    /// P(sensitive) at or above which a detection quarantines, in (0, 1]
    /// (default 0.35: set for recall; a missed self-harm record costs more
    /// than a quarantined workout note). The classifier reads it too.
    pub threshold: f64,
    /// The threshold of a `mental_health_self_harm` detection, in (0, 1]
    /// (default 0.35): a missed safety record costs more than the other
    /// categories' quarantines, so it may sit under `threshold`.
    pub safety_threshold: f64,
    /// The categories whose detections quarantine (default: all nine of
    /// `vocab::SENSITIVE_CATEGORIES`); empty: none does.
    pub quarantine_categories: Vec<String>,
}

impl Default for SensitiveContent {
    fn default() -> Self {
        Self {
            detect: true,
            threshold: crate::annotate::sensitive::DEFAULT_THRESHOLD,
            safety_threshold: crate::annotate::sensitive::DEFAULT_SAFETY_THRESHOLD,
            quarantine_categories: strings(&SENSITIVE_CATEGORIES),
        }
    }
}

impl SensitiveContent {
    /// The detector's thresholds: `threshold`, and `safety_threshold` for
    /// `mental_health_self_harm`.
    pub fn thresholds(&self) -> crate::annotate::sensitive::Thresholds {
        crate::annotate::sensitive::Thresholds {
            general: self.threshold,
            safety: self.safety_threshold,
        }
    }

    /// Whether a detection of `category` at `confidence` quarantines: at or
    /// above its category's threshold, for a listed category.
    pub fn quarantines(&self, category: &str, confidence: f64) -> bool {
        self.detect
            && confidence >= self.thresholds().of(category)
            && self.quarantine_categories.iter().any(|c| c == category)
    }

    /// Checks the block; returns (key path, message).
    fn check(&self) -> Result<(), (String, String)> {
        const K: &str = "persona_memory_policy.sensitive_content";
        for (key, t) in [
            ("threshold", self.threshold),
            ("safety_threshold", self.safety_threshold),
        ] {
            if !(t > 0.0 && t <= 1.0) {
                return Err((
                    format!("{K}.{key}"),
                    format!(
                        "{t} is outside (0, 1]: a detection quarantines when its P(sensitive) is at or above it (0 would quarantine every record)"
                    ),
                ));
            }
        }
        for (i, c) in self.quarantine_categories.iter().enumerate() {
            if !SENSITIVE_CATEGORIES.contains(&c.as_str()) {
                return Err((
                    format!("{K}.quarantine_categories[{i}]"),
                    format!(
                        "`{c}` is not a sensitive category ({})",
                        SENSITIVE_CATEGORIES.join(", ")
                    ),
                ));
            }
            if self.quarantine_categories[..i].contains(c) {
                return Err((
                    format!("{K}.quarantine_categories[{i}]"),
                    format!("`{c}` is listed twice"),
                ));
            }
        }
        Ok(())
    }
}

/// `tom_lite`: the controlled vocabulary and per-memory limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TomLite {
    /// Must be true: the vocabulary is closed.
    pub controlled_vocabulary: bool,
    /// Must be `denied`.
    pub freeform_tom_tags: String,
    /// Most tom_kind tags one record may carry (seed: 2; 1 or 2).
    pub max_tom_kinds_per_memory: u32,
    /// Most affect labels one record may carry (seed: 1).
    pub max_affect_labels_per_memory: u32,
    /// Must be true: every tag and edge needs a verbatim source quote.
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
    /// Must be true: a verbatim quote is required.
    pub source_quote_required: bool,
}

/// `promote_edges_when`: the minimum is inclusive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromoteEdges {
    /// Minimum edge confidence (seed: 0.85).
    pub edge_confidence_min: f64,
    /// Must be true: a verbatim quote is required.
    pub source_quote_required: bool,
    /// Must be true: source and target must be registry nodes or memories.
    pub both_nodes_must_exist: bool,
    /// Must be true: edge keys are always computed by the job.
    pub deterministic_edge_key_required: bool,
    /// Most edge candidates one record may carry (seed: 2; 1 or 2).
    pub max_edges_per_record: u32,
}

/// `classifier_policy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifierPolicy {
    /// The local classifier is optional: annotations made elsewhere
    /// (`--annotations`, `--raw-annotations`) may replace it. False: it is
    /// required, and annotations made elsewhere are refused.
    pub optional: bool,
    /// Must be true: the model only suggests.
    pub output_is_advisory: bool,
    /// Must be `abstain`.
    pub weak_classification_action: String,
    /// The local classifier may suggest labels. False: `run` without
    /// annotations made elsewhere, and `annotate`, are refused.
    pub local_llm_or_classifier_may_suggest: bool,
    /// Must be true: durable writes need a curator.
    pub durable_memory_write_requires_curator_or_project_agent: bool,
    /// The local classifier tags nothing (abstains) when its best tom_kind's
    /// calibrated probability is under this (default 0.5: it tags a kind only
    /// when the record more likely than not carries it).
    pub abstain_below: f64,
}

/// The largest `run.max_text_bytes` accepted: 64 MiB.
pub const MAX_TEXT_BYTES_LIMIT: u64 = 64 * 1024 * 1024;

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

/// `persona_memory_policy.graph_policy`: rules of the memory service, which
/// owns the graph. tomlite writes no graph edge and traverses nothing (its
/// edges are staged one hop, record to node, for a curator), so these keys
/// accept only the seed's values: a pasted block loads, a changed one is
/// refused rather than silently ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GraphPolicy {
    /// Must be true.
    pub graph_connections_remain: bool,
    /// Must be `memory_service`.
    pub traversal_owner: String,
    /// Must be `denied`.
    pub direct_graph_access: String,
    /// Must be `denied`: tomlite only stages edge candidates.
    pub direct_graph_edge_creation_by_subagent: String,
    /// Must be true: every record needs its `source_path` (ingest rejects one without).
    pub require_source_paths: bool,
    /// Must be 2 (the memory service's traversal).
    pub max_hops_default: u32,
    /// Must be 3 (the memory service's traversal).
    pub max_hops_without_project_agent_approval: u32,
}

/// `persona_memory_policy.intensity_policy`: what intensity may be used for.
/// tomlite stages intensity labels and promotes on their confidence only,
/// never on their value, so the lists accept the seed's items only (in any order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntensityPolicy {
    /// The seed's five uses.
    pub use_for: Vec<String>,
    /// The seed's four forbidden uses.
    pub must_not_use_for: Vec<String>,
}

impl Default for GraphPolicy {
    fn default() -> Self {
        Self {
            graph_connections_remain: true,
            traversal_owner: "memory_service".into(),
            direct_graph_access: "denied".into(),
            direct_graph_edge_creation_by_subagent: "denied".into(),
            require_source_paths: true,
            max_hops_default: 2,
            max_hops_without_project_agent_approval: 3,
        }
    }
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

    /// The policy as canonical JSON (fixed key order), the input of [`Policy::sha256`].
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("a policy always serialises")
    }

    /// sha256 of the effective policy; goes into every receipt and the state.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
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
    fn the_seeds_blocks_copied_verbatim_load_as_the_seed_policy() {
        let y = include_str!("../../../../../tests/fixtures/policy/seed-blocks.yaml");
        assert_eq!(parse(y).unwrap(), Policy::default());
        // The printed layout reads back to the same policy.
        let mut p = Policy::default();
        p.tom_lite.max_tom_kinds_per_memory = 1;
        p.classifier_policy.abstain_below = 0.6;
        assert_eq!(parse(&p.to_yaml()).unwrap(), p);
    }

    #[test]
    fn a_rule_switched_off_is_named_where_the_file_put_it() {
        let e = parse("persona_memory_policy:\n  tom_lite:\n    require_source_anchor: false\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("persona_memory_policy.tom_lite.require_source_anchor: must be true"),
            "{e}"
        );
        let e = parse("tom_lite:\n  require_source_anchor: false\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("t.yaml: tom_lite.require_source_anchor: must be true"),
            "{e}"
        );
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
    fn sensitive_content_defaults_to_on_at_0_35_for_every_category() {
        let p = parse("").unwrap();
        let s = &p.persona_memory_policy.sensitive_content;
        assert!(s.detect);
        assert_eq!(s.threshold, 0.35);
        assert_eq!(s.quarantine_categories, strings(&SENSITIVE_CATEGORIES));
        assert!(s.quarantines("health", 0.35));
        assert!(!s.quarantines("health", 0.349));
        let q = parse(
            "persona_memory_policy:\n  sensitive_content:\n    quarantine_categories: [sexual]\n    threshold: 1\n",
        )
        .unwrap();
        let s = &q.persona_memory_policy.sensitive_content;
        assert!(s.quarantines("sexual", 1.0) && !s.quarantines("health", 1.0));
        assert_ne!(p.sha256(), q.sha256());
        assert_eq!(parse(&q.to_yaml()).unwrap(), q);
    }

    #[test]
    fn a_safety_detection_has_its_own_threshold() {
        let p = parse(
            "persona_memory_policy:\n  sensitive_content:\n    threshold: 0.6\n    safety_threshold: 0.3\n",
        )
        .unwrap();
        let s = &p.persona_memory_policy.sensitive_content;
        assert!(s.quarantines("mental_health_self_harm", 0.3));
        assert!(!s.quarantines("mental_health_self_harm", 0.29));
        assert!(!s.quarantines("health", 0.59) && s.quarantines("health", 0.6));
        assert_eq!(s.thresholds().of("credentials_pii"), 0.6);
        assert_ne!(p.sha256(), parse("").unwrap().sha256());
        assert_eq!(parse(&p.to_yaml()).unwrap(), p);
        let d = parse("").unwrap();
        assert_eq!(
            d.persona_memory_policy.sensitive_content.safety_threshold,
            0.35
        );
    }

    #[test]
    fn sensitive_content_keys_out_of_range_or_unknown_are_named() {
        for (y, needle) in [
            (
                "threshold: 0",
                "sensitive_content.threshold: 0 is outside (0, 1]",
            ),
            (
                "threshold: -0.1",
                "sensitive_content.threshold: -0.1 is outside (0, 1]",
            ),
            (
                "threshold: 1.01",
                "sensitive_content.threshold: 1.01 is outside (0, 1]",
            ),
            (
                "safety_threshold: 0",
                "sensitive_content.safety_threshold: 0 is outside (0, 1]",
            ),
            (
                "quarantine_categories: [health, Health]",
                "sensitive_content.quarantine_categories[1]: `Health` is not a sensitive category",
            ),
            (
                "quarantine_categories: [sexual, sexual]",
                "sensitive_content.quarantine_categories[1]: `sexual` is listed twice",
            ),
        ] {
            let e = parse(&format!(
                "persona_memory_policy:\n  sensitive_content:\n    {y}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("persona_memory_policy.{needle}")),
                "{y}: {e}"
            );
        }
        // Only under persona_memory_policy.
        assert!(parse("sensitive_content:\n  detect: false\n").is_err());
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
