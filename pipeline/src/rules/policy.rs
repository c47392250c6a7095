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

/// The seed's `persona_memory_policy:` block as a file may hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PersonaBlock {
    required_when_persona_attached: bool,
    persona_id_field: String,
    allowed_collections: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tom_lite: Option<TomLite>,
    graph_policy: GraphPolicy,
    intensity_policy: IntensityPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    classifier_policy: Option<ClassifierPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sensitive_content: Option<SensitiveContent>,
}

/// A policy file in either layout.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PolicyFile {
    persona_memory_policy: Option<PersonaBlock>,
    tom_lite: Option<TomLite>,
    tom_lite_promotion_policy: PromotionPolicy,
    classifier_policy: Option<ClassifierPolicy>,
    run: RunPolicy,
}

/// The effective policy in the seed's layout, for `tomlite policy`.
#[derive(Serialize)]
struct SeedLayout<'a> {
    persona_memory_policy: PersonaBlock,
    tom_lite_promotion_policy: &'a PromotionPolicy,
    run: &'a RunPolicy,
}

const SEED_COLLECTIONS: [&str; 7] = [
    "personas",
    "persona_memory",
    "persona_memory_edges",
    "persona_states",
    "user_agent_relationships",
    "user_lessons",
    "tom_edges",
];
const SEED_INTENSITY_USES: [&str; 5] = [
    "retrieval_reranking",
    "graph_traversal_weight",
    "salience",
    "response_tone",
    "continuity_priority",
];
const SEED_INTENSITY_NEVER: [&str; 4] = [
    "truth_claims",
    "evidence_sufficiency",
    "compliance_approval",
    "permission_to_act",
];

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

impl Default for IntensityPolicy {
    fn default() -> Self {
        Self {
            use_for: strings(&SEED_INTENSITY_USES),
            must_not_use_for: strings(&SEED_INTENSITY_NEVER),
        }
    }
}

impl Default for PersonaBlock {
    fn default() -> Self {
        Self {
            required_when_persona_attached: true,
            persona_id_field: "active_domain_persona".into(),
            allowed_collections: strings(&SEED_COLLECTIONS),
            tom_lite: None,
            graph_policy: GraphPolicy::default(),
            intensity_policy: IntensityPolicy::default(),
            classifier_policy: None,
            sensitive_content: None,
        }
    }
}

/// `list` must hold exactly the items of `seed`, in any order.
fn same_set(key: &str, list: &[String], seed: &[&str], why: &str) -> Result<(), (String, String)> {
    for (i, x) in list.iter().enumerate() {
        if !seed.contains(&x.as_str()) {
            return Err((
                format!("{key}[{i}]"),
                format!(
                    "`{x}` is not in the seed's list ({}); {why}",
                    seed.join(", ")
                ),
            ));
        }
        if list[..i].contains(x) {
            return Err((format!("{key}[{i}]"), format!("`{x}` is listed twice")));
        }
    }
    for x in seed {
        if !list.iter().any(|l| l == x) {
            return Err((key.to_string(), format!("must list `{x}`; {why}")));
        }
    }
    Ok(())
}

impl PersonaBlock {
    /// The memory service's keys hold the seed's values; returns (key path, message).
    fn check(&self) -> Result<(), (String, String)> {
        const P: &str = "persona_memory_policy";
        let seed = Self::default();
        let fixed = |key: &str, ok: bool, expected: &str, why: &str| {
            if ok {
                Ok(())
            } else {
                Err((format!("{P}.{key}"), format!("must be {expected}: {why}")))
            }
        };
        fixed(
            "required_when_persona_attached",
            self.required_when_persona_attached,
            "true",
            "every persona-attached worker keeps this memory policy",
        )?;
        fixed(
            "persona_id_field",
            self.persona_id_field == seed.persona_id_field,
            "`active_domain_persona`",
            "the memory service's field; tomlite reads each record's `persona_id`",
        )?;
        same_set(
            &format!("{P}.allowed_collections"),
            &self.allowed_collections,
            &SEED_COLLECTIONS,
            "tomlite writes no collection (only its staging directory), so only the seed's list is accepted",
        )?;
        let g = &self.graph_policy;
        let memory_service = "tomlite writes no graph edge and traverses nothing (it stages one-hop edge candidates for a curator); this key belongs to the memory service, so only the seed's value is accepted";
        fixed(
            "graph_policy.graph_connections_remain",
            g.graph_connections_remain,
            "true",
            memory_service,
        )?;
        fixed(
            "graph_policy.traversal_owner",
            g.traversal_owner == "memory_service",
            "`memory_service`",
            memory_service,
        )?;
        fixed(
            "graph_policy.direct_graph_access",
            g.direct_graph_access == "denied",
            "`denied`",
            "tomlite never reads or writes the graph directly",
        )?;
        fixed(
            "graph_policy.direct_graph_edge_creation_by_subagent",
            g.direct_graph_edge_creation_by_subagent == "denied",
            "`denied`",
            "tomlite only stages edge candidates; a curator promotes them",
        )?;
        fixed(
            "graph_policy.require_source_paths",
            g.require_source_paths,
            "true",
            "every record needs its `source_path` (ingest rejects a record without one)",
        )?;
        fixed(
            "graph_policy.max_hops_default",
            g.max_hops_default == 2,
            "2",
            memory_service,
        )?;
        fixed(
            "graph_policy.max_hops_without_project_agent_approval",
            g.max_hops_without_project_agent_approval == 3,
            "3",
            memory_service,
        )?;
        let why = "tomlite promotes on a label's confidence, never on the intensity itself, so only the seed's list is accepted";
        same_set(
            &format!("{P}.intensity_policy.use_for"),
            &self.intensity_policy.use_for,
            &SEED_INTENSITY_USES,
            why,
        )?;
        same_set(
            &format!("{P}.intensity_policy.must_not_use_for"),
            &self.intensity_policy.must_not_use_for,
            &SEED_INTENSITY_NEVER,
            why,
        )?;
        Ok(())
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

    /// Parses and checks policy YAML; `path` is only used in messages.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let key_error = |key: String, message: String| PolicyError::Key {
            path: path.to_path_buf(),
            key,
            message,
        };
        let file = PolicyFile::parse(text, path)?;
        let (policy, nested) = file
            .into_policy()
            .map_err(|(key, message)| key_error(key, message))?;
        policy
            .check()
            .map_err(|(key, message)| key_error(nested.where_written(key), message))?;
        Ok(policy)
    }

    /// Checks ranges, fixed values and vocabularies; returns (key path, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        self.tom_lite.check()?;
        self.check_confidence_minimums()?;
        self.tom_lite_promotion_policy.check_rules()?;
        self.classifier_policy.check()?;
        if self.run.max_text_bytes == 0 || self.run.max_text_bytes > MAX_TEXT_BYTES_LIMIT {
            return reject(
                "run.max_text_bytes",
                format!(
                    "{} is outside 1..={MAX_TEXT_BYTES_LIMIT} (64 MiB): the line cap of JSONL input is six times it, and a larger value would overflow it",
                    self.run.max_text_bytes
                ),
            );
        }
        self.persona_memory_policy.sensitive_content.check()
    }

    /// Every confidence minimum (and `abstain_below`) lies in [0, 1].
    fn check_confidence_minimums(&self) -> Result<(), (String, String)> {
        let tags = &self.tom_lite_promotion_policy.promote_tags_when;
        let edges = &self.tom_lite_promotion_policy.promote_edges_when;
        for (key, minimum) in [
            (
                "tom_lite_promotion_policy.promote_tags_when.tom_kind_confidence_min",
                tags.tom_kind_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.affect_confidence_min",
                tags.affect_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.intensity_confidence_min",
                tags.intensity_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_edges_when.edge_confidence_min",
                edges.edge_confidence_min,
            ),
            (
                "classifier_policy.abstain_below",
                self.classifier_policy.abstain_below,
            ),
        ] {
            if !(0.0..=1.0).contains(&minimum) {
                return reject(key, format!("{minimum} is outside [0, 1]"));
            }
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

    /// The effective policy as YAML in the seed's layout, ready to paste
    /// into `tomlite.yaml`.
    pub fn to_yaml(&self) -> String {
        let layout = SeedLayout {
            persona_memory_policy: PersonaBlock {
                tom_lite: Some(self.tom_lite.clone()),
                classifier_policy: Some(self.classifier_policy.clone()),
                sensitive_content: Some(self.persona_memory_policy.sensitive_content.clone()),
                ..PersonaBlock::default()
            },
            tom_lite_promotion_policy: &self.tom_lite_promotion_policy,
            run: &self.run,
        };
        serde_saphyr::to_string(&layout).expect("a policy always serialises")
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

/// Which blocks a policy file put under `persona_memory_policy` (the seed's
/// layout) rather than at the top level.
#[derive(Debug, Default)]
struct NestedBlocks {
    tom_lite: bool,
    classifier_policy: bool,
}

impl NestedBlocks {
    /// `key` (a path in the effective policy) as the file wrote it.
    fn where_written(&self, key: String) -> String {
        let under = |block: &str| {
            key == block
                || key.starts_with(&format!("{block}."))
                || key.starts_with(&format!("{block}["))
        };
        if (self.tom_lite && under("tom_lite"))
            || (self.classifier_policy && under("classifier_policy"))
        {
            format!("persona_memory_policy.{key}")
        } else {
            key
        }
    }
}

impl PolicyFile {
    /// YAML to a generic tree first, then the tree to the typed file through
    /// serde_path_to_error, so that every error knows its key path.
    fn parse(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let tree: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_saphyr::from_str(text).map_err(|error| PolicyError::Yaml {
                path: path.to_path_buf(),
                message: error.to_string(),
            })?
        };
        let tree = if tree.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            tree
        };
        serde_path_to_error::deserialize(tree).map_err(|error| {
            let key = error.path().to_string();
            PolicyError::Key {
                path: path.to_path_buf(),
                key: if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                message: error.inner().to_string(),
            }
        })
    }

    /// The effective policy (not yet checked) and where its blocks were
    /// written; the persona block's own keys are checked here; returns
    /// (key path, message).
    fn into_policy(self) -> Result<(Policy, NestedBlocks), (String, String)> {
        let mut nested = NestedBlocks::default();
        let mut tom_lite = self.tom_lite;
        let mut classifier_policy = self.classifier_policy;
        let mut sensitive_content = None;
        if let Some(block) = self.persona_memory_policy {
            sensitive_content = block.sensitive_content.clone();
            block.check()?;
            nested.tom_lite = nested_once("tom_lite", &tom_lite, &block.tom_lite)?;
            nested.classifier_policy = nested_once(
                "classifier_policy",
                &classifier_policy,
                &block.classifier_policy,
            )?;
            tom_lite = tom_lite.or(block.tom_lite);
            classifier_policy = classifier_policy.or(block.classifier_policy);
        }
        let policy = Policy {
            tom_lite: tom_lite.unwrap_or_default(),
            tom_lite_promotion_policy: self.tom_lite_promotion_policy,
            classifier_policy: classifier_policy.unwrap_or_default(),
            run: self.run,
            persona_memory_policy: PersonaMemoryPolicy {
                sensitive_content: sensitive_content.unwrap_or_default(),
            },
        };
        Ok((policy, nested))
    }
}

/// Whether block `name` is given under `persona_memory_policy`; an error
/// when it is given there and at the top level too.
fn nested_once<T>(
    name: &str,
    top_level: &Option<T>,
    under_persona: &Option<T>,
) -> Result<bool, (String, String)> {
    if top_level.is_some() && under_persona.is_some() {
        return Err((
            name.into(),
            "given both at the top level and under persona_memory_policy; keep one (the seed's layout has it under persona_memory_policy)".into(),
        ));
    }
    Ok(under_persona.is_some())
}

/// A failed check: the key's path and what is wrong with it.
fn reject(key: &str, message: String) -> Result<(), (String, String)> {
    Err((key.to_string(), message))
}

impl TomLite {
    /// The seed's rules are on and every label is in the vocabulary;
    /// returns (key path, message).
    fn check(&self) -> Result<(), (String, String)> {
        if !self.controlled_vocabulary {
            return reject(
                "tom_lite.controlled_vocabulary",
                "must be true: the vocabulary is closed".into(),
            );
        }
        if self.freeform_tom_tags != "denied" {
            return reject(
                "tom_lite.freeform_tom_tags",
                format!("must be `denied`, found `{}`", self.freeform_tom_tags),
            );
        }
        if !(1..=2).contains(&self.max_tom_kinds_per_memory) {
            return reject(
                "tom_lite.max_tom_kinds_per_memory",
                format!(
                    "{} is outside [1, 2]: the seed allows at most 2 tom_kinds per memory; a policy may lower that, not raise it",
                    self.max_tom_kinds_per_memory
                ),
            );
        }
        if !self.require_source_anchor {
            return reject(
                "tom_lite.require_source_anchor",
                "must be true: every promoted tag and edge is anchored by a verbatim quote of its record (the seed's rule; an item without one is quarantined `source_quote_missing`)".into(),
            );
        }
        if self.max_affect_labels_per_memory != 1 {
            return reject(
                "tom_lite.max_affect_labels_per_memory",
                format!(
                    "must be 1 (one affect per record), found {}",
                    self.max_affect_labels_per_memory
                ),
            );
        }
        self.check_label_lists()
    }

    /// Each label list is non-empty and inside its field's vocabulary.
    fn check_label_lists(&self) -> Result<(), (String, String)> {
        for (key, list, field) in [
            ("tom_lite.tom_kind", &self.tom_kind, Field::TomKind),
            ("tom_lite.affect", &self.affect, Field::Affect),
            ("tom_lite.intensity", &self.intensity, Field::Intensity),
        ] {
            if list.is_empty() {
                return reject(key, "must name at least one label".into());
            }
            for (index, label) in list.iter().enumerate() {
                if !field.contains(label) {
                    return reject(
                        &format!("{key}[{index}]"),
                        format!(
                            "`{label}` is not in the ToM-lite {} vocabulary ({})",
                            field.name(),
                            field.labels().join(", ")
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

impl PromotionPolicy {
    /// The seed's promotion rules are on and `quarantine_when` names every
    /// seed reason; returns (key path, message). Confidence ranges are
    /// checked by [`Policy::check`].
    fn check_rules(&self) -> Result<(), (String, String)> {
        for (key, required) in [
            (
                "tom_lite_promotion_policy.promote_tags_when.source_quote_required",
                self.promote_tags_when.source_quote_required,
            ),
            (
                "tom_lite_promotion_policy.promote_edges_when.source_quote_required",
                self.promote_edges_when.source_quote_required,
            ),
        ] {
            if !required {
                return reject(
                    key,
                    "must be true: the seed promotes only what a verbatim quote of the record supports (`source_quote_missing` otherwise)".into(),
                );
            }
        }
        self.promote_edges_when.check()?;
        self.check_quarantine_when()
    }

    /// Every listed reason exists and every seed reason is listed.
    fn check_quarantine_when(&self) -> Result<(), (String, String)> {
        for (index, listed) in self.quarantine_when.iter().enumerate() {
            if Reason::parse(listed).is_none() {
                return reject(
                    &format!("tom_lite_promotion_policy.quarantine_when[{index}]"),
                    format!(
                        "`{listed}` is not a quarantine reason ({})",
                        Reason::ALL
                            .iter()
                            .map(|reason| reason.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        for reason in Reason::SEED {
            if !self
                .quarantine_when
                .iter()
                .any(|listed| listed == reason.as_str())
            {
                return reject(
                    "tom_lite_promotion_policy.quarantine_when",
                    format!(
                        "must list `{}`: a run never promotes what the seed quarantines",
                        reason.as_str()
                    ),
                );
            }
        }
        Ok(())
    }
}

impl PromoteEdges {
    /// The seed's edge rules are on and the per-record limit is 1 or 2.
    fn check(&self) -> Result<(), (String, String)> {
        if !self.both_nodes_must_exist {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.both_nodes_must_exist",
                "must be true: an edge is promoted only between registry nodes or memories (`unknown_target_node` otherwise); false would promote edges to nodes nobody registered".into(),
            );
        }
        if !(1..=2).contains(&self.max_edges_per_record) {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.max_edges_per_record",
                format!(
                    "{} is outside [1, 2]: the seed quarantines every edge of a record with more than two candidates (`more_than_two_edge_candidates`); a policy may lower the limit, not raise it",
                    self.max_edges_per_record
                ),
            );
        }
        if !self.deterministic_edge_key_required {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.deterministic_edge_key_required",
                "must be true: edge keys are always derived from (source, relation, target)".into(),
            );
        }
        Ok(())
    }
}

impl ClassifierPolicy {
    /// The model only suggests, abstains when weak, and is not both required
    /// and forbidden; returns (key path, message). `abstain_below`'s range is
    /// checked by [`Policy::check`].
    fn check(&self) -> Result<(), (String, String)> {
        if !self.output_is_advisory {
            return reject(
                "classifier_policy.output_is_advisory",
                "must be true: the model only suggests".into(),
            );
        }
        if !self.optional && !self.local_llm_or_classifier_may_suggest {
            return reject(
                "classifier_policy.optional",
                "cannot be false while local_llm_or_classifier_may_suggest is false: the local classifier would be both required and forbidden".into(),
            );
        }
        if self.weak_classification_action != "abstain" {
            return reject(
                "classifier_policy.weak_classification_action",
                format!(
                    "must be `abstain`, found `{}`",
                    self.weak_classification_action
                ),
            );
        }
        if !self.durable_memory_write_requires_curator_or_project_agent {
            return reject(
                "classifier_policy.durable_memory_write_requires_curator_or_project_agent",
                "must be true: the job only stages, a curator promotes durably".into(),
            );
        }
        Ok(())
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
        let y = include_str!("../../../tests/fixtures/policy/seed-blocks.yaml");
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
