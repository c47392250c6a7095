//! The validator and the promotion decision (docs/design.md "Decisions").
//!
//! Every tag and edge of an annotation is checked against the vocabulary,
//! the per-record limits, its quote and (for edges) the node registry, and
//! keeps *every* reason that applies. An item with no reason is promoted;
//! any other is quarantined. A record with no annotation or no tag is
//! abstained.

use sha2::{Digest as _, Sha256};

use crate::annotate::{
    Annotated, Annotation, EdgeCandidate, Quote, Scored, Sensitive, TagCandidate,
};
use crate::ingest::record::Record;
use crate::rules::policy::Policy;
use crate::rules::reason::Reason;
use crate::vocab::{Field, SAFETY_CATEGORY, SENSITIVE_CATEGORIES, suggest};

/// Whether a node exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exists {
    /// A registry node, or a memory of the input or of the state.
    Yes,
    /// Neither.
    No,
    /// A `memory:<id>` whose record has not come yet in this input: decided
    /// when the input is exhausted.
    Later(String),
}

/// Answers whether a node id exists.
pub trait Nodes {
    /// Whether `node` exists.
    fn exists(&self, node: &str) -> Exists;
}

/// A decided tag.
#[derive(Debug, Clone, PartialEq)]
pub struct TagItem {
    /// Stable id: `<record id>#tag<n>`.
    pub item_id: String,
    /// The tom_kind as the annotator wrote it.
    pub tom_kind: Option<String>,
    /// Its confidence.
    pub confidence: Option<f64>,
    /// The record's affect (as written).
    pub affect: Option<String>,
    /// Its confidence.
    pub affect_confidence: Option<f64>,
    /// The record's intensity (as written).
    pub intensity: Option<String>,
    /// Its confidence.
    pub intensity_confidence: Option<f64>,
    /// The supporting quote.
    pub quote: Quote,
    /// Every reason that applies; empty means promoted.
    pub reasons: Vec<Reason>,
    /// Canonical tom_kind for a free-form one.
    pub suggested_label: Option<String>,
    /// Canonical affect for a free-form one.
    pub suggested_affect: Option<String>,
    /// Canonical intensity for a free-form one.
    pub suggested_intensity: Option<String>,
    /// Human-readable details of the reasons.
    pub detail: Vec<String>,
}

/// A decided edge.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeItem {
    /// Stable id: `<record id>#edge<n>`.
    pub item_id: String,
    /// Deterministic key of (source, relation, target).
    pub edge_key: String,
    /// Source node.
    pub source_node: String,
    /// Relation (as written).
    pub relation: Option<String>,
    /// Target node (as written).
    pub target_node: Option<String>,
    /// The mention that named the target.
    pub target_mention: Option<String>,
    /// Confidence.
    pub confidence: Option<f64>,
    /// The supporting quote.
    pub quote: Quote,
    /// Every reason that applies; empty means promoted.
    pub reasons: Vec<Reason>,
    /// Canonical relation for a free-form one.
    pub suggested_label: Option<String>,
    /// Human-readable details of the reasons.
    pub detail: Vec<String>,
    /// Memory nodes that must still be confirmed when the input ends.
    pub pending: Vec<String>,
}

impl EdgeItem {
    /// Settles the pending memory nodes: `exists` says which of them the input held.
    pub fn resolve(&mut self, exists: impl Fn(&str) -> bool) {
        for node in std::mem::take(&mut self.pending) {
            if !exists(&node) {
                self.detail
                    .push(format!("node `memory:{node}` does not exist"));
                add(&mut self.reasons, Reason::UnknownTargetNode);
            }
        }
    }
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Annotated: tags and edges, each promoted or quarantined. `tags` may be
    /// empty, and then the record is also abstained.
    Annotated {
        /// The decided tags.
        tags: Vec<TagItem>,
        /// The decided edges.
        edges: Vec<EdgeItem>,
        /// The annotator's best kind, when it gave no tag.
        best: Option<(String, f64)>,
        /// The record is flagged, or holds a detection that quarantines.
        sensitive: Option<Box<SensitiveRecord>>,
    },
    /// No annotation at all.
    Missing,
    /// The annotation could not be read: one quarantined item with the raw text.
    Unparseable {
        /// The raw annotator output.
        raw: String,
        /// Why it could not be read.
        error: String,
    },
}

/// A sensitive record: flagged by its producer, or holding sensitive
/// content the annotator detected and the policy quarantines.
#[derive(Debug, Clone, PartialEq)]
pub struct SensitiveRecord {
    /// The producer's flags (`sensitive`, `safety`); may be empty.
    pub flags: Vec<String>,
    /// The detection that quarantines: a known category in the policy's
    /// `quarantine_categories`, confidence at or above its threshold.
    pub detection: Option<Sensitive>,
    /// A safety record: flagged `safety`, or detected `mental_health_self_harm`.
    pub safety: bool,
}

/// What a record's flags and its annotation's `sensitive` mean for its
/// items: the reasons and details every tag and edge gets, and the record
/// as the `sensitive` table lists it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SensitiveCheck {
    /// Reasons shared by every tag and edge of the record.
    pub reasons: Vec<Reason>,
    /// Their details.
    pub detail: Vec<String>,
    /// The record, when it is sensitive.
    pub record: Option<SensitiveRecord>,
}

fn bytes(q: &Quote) -> String {
    format!(
        "[{}, {})",
        q.start.map_or("?".into(), |s| s.to_string()),
        q.end.map_or("?".into(), |e| e.to_string())
    )
}

/// Checks a record's flags and its annotation's sensitive content against
/// `persona_memory_policy.sensitive_content`. A flag always quarantines; a
/// detection quarantines when the policy detects, its category is listed
/// and its confidence is at or above the threshold, verbatim quote or not
/// (sensitive content is never promoted on a technicality: a quote that is
/// not verbatim is said so). A detection that cannot be read (unknown or
/// missing category, a field of the wrong type) quarantines
/// `unparseable_annotation`.
pub fn sensitivity(
    record: &Record,
    annotation: Option<&Annotation>,
    policy: &Policy,
) -> SensitiveCheck {
    let mut out = SensitiveCheck::default();
    if record.is_sensitive() {
        add(&mut out.reasons, Reason::SensitiveBoundaryOrSafetyRecord);
        out.detail
            .push(format!("record is flagged {}", record.flags.join(", ")));
    }
    let policy = &policy.persona_memory_policy.sensitive_content;
    let mut detection = None;
    if let Some(s) = annotation.and_then(|a| a.sensitive.as_ref())
        && policy.detect
    {
        for p in &s.problems {
            add(&mut out.reasons, Reason::UnparseableAnnotation);
            out.detail.push(p.clone());
        }
        match s.category.as_deref() {
            None => {
                add(&mut out.reasons, Reason::UnparseableAnnotation);
                out.detail
                    .push("sensitive.category: missing (a detection names its category)".into());
            }
            Some(c) if !SENSITIVE_CATEGORIES.contains(&c) => {
                add(&mut out.reasons, Reason::UnparseableAnnotation);
                out.detail.push(format!(
                    "sensitive.category: `{c}` is not a sensitive category ({})",
                    SENSITIVE_CATEGORIES.join(", ")
                ));
            }
            Some(c) => match s.confidence {
                None if s.problems.is_empty() => {
                    add(&mut out.reasons, Reason::UnparseableAnnotation);
                    out.detail.push(format!(
                        "sensitive.confidence: missing (a detection of {c} gives its P(sensitive))"
                    ));
                }
                None => {}
                Some(conf) if policy.quarantines(c, conf) => {
                    add(&mut out.reasons, Reason::SensitiveBoundaryOrSafetyRecord);
                    let detector = s.detector.as_deref().unwrap_or("detector not named");
                    let at = match s.quote.text.as_deref() {
                        Some(q) if !q.is_empty() => {
                            let mut at = format!("in {q:?} at bytes {}", bytes(&s.quote));
                            if !s.quote.is_verbatim(&record.text) {
                                at.push_str(" (the quote is not verbatim at those bytes)");
                            }
                            at
                        }
                        _ => "(no quote given)".into(),
                    };
                    out.detail.push(format!(
                        "sensitive content detected: {c} (confidence {conf}, {detector}) {at}"
                    ));
                    detection = Some(s.clone());
                }
                Some(_) => {}
            },
        }
    }
    if record.is_sensitive() || detection.is_some() {
        let safety = record.flags.iter().any(|f| f == "safety")
            || detection
                .as_ref()
                .is_some_and(|d| d.category.as_deref() == Some(SAFETY_CATEGORY));
        out.record = Some(SensitiveRecord {
            flags: record.flags.clone(),
            detection,
            safety,
        });
    }
    out
}

fn add(reasons: &mut Vec<Reason>, r: Reason) {
    if !reasons.contains(&r) {
        reasons.push(r);
        reasons.sort();
    }
}

/// Deterministic edge key: the first 128 bits of sha256(source, relation, target), hex.
pub fn edge_key(source: &str, relation: &str, target: &str) -> String {
    let mut h = Sha256::new();
    for part in [source, relation, target] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Checks a label of `field` against the policy: the reason, a suggestion and a detail.
fn check_label(
    policy: &Policy,
    field: Field,
    label: &str,
) -> Option<(Option<&'static str>, String)> {
    if policy.accepts(field, label) {
        return None;
    }
    let suggestion = suggest(field, label);
    let detail = match suggestion {
        Some(s) => format!(
            "{} `{label}` is free-form (did you mean `{s}`?)",
            field.name()
        ),
        None => format!("{} `{label}` is not in the vocabulary", field.name()),
    };
    Some((suggestion, detail))
}

/// Decides one record.
pub fn decide(
    record: &Record,
    annotated: &Annotated,
    policy: &Policy,
    nodes: &dyn Nodes,
) -> Decision {
    match annotated {
        Annotated::Missing => Decision::Missing,
        Annotated::Unparseable { raw, error, .. } => Decision::Unparseable {
            raw: raw.clone(),
            error: error.clone(),
        },
        Annotated::Parsed(a) => {
            let sensitive = sensitivity(record, Some(a), policy);
            Decision::Annotated {
                tags: decide_tags(record, a, policy, &sensitive),
                edges: decide_edges(record, a, policy, nodes, &sensitive),
                best: if a.tags.is_empty() {
                    a.best.clone()
                } else {
                    None
                },
                sensitive: sensitive.record.map(Box::new),
            }
        }
    }
}

fn record_label(
    policy: &Policy,
    field: Field,
    min: f64,
    scored: &[Scored],
    reasons: &mut Vec<Reason>,
    detail: &mut Vec<String>,
) -> (Option<String>, Option<f64>, Option<String>) {
    let Some(first) = scored.first() else {
        add(reasons, Reason::ConfidenceBelowThreshold);
        detail.push(format!("the record has no {}", field.name()));
        return (None, None, None);
    };
    let mut suggestion = None;
    for p in &first.problems {
        add(reasons, Reason::UnparseableAnnotation);
        detail.push(format!("{}: {p}", field.name()));
    }
    match &first.label {
        None => {
            add(reasons, Reason::UnparseableAnnotation);
            detail.push(format!("{} has no label", field.name()));
        }
        Some(label) => {
            if let Some((s, d)) = check_label(policy, field, label) {
                add(reasons, Reason::FreeformTomLabel);
                suggestion = s.map(str::to_string);
                detail.push(d);
            }
        }
    }
    check_confidence(field.name(), first.confidence, min, reasons, detail);
    (first.label.clone(), first.confidence, suggestion)
}

fn decide_tags(
    record: &Record,
    annotation: &Annotation,
    policy: &Policy,
    sensitive: &SensitiveCheck,
) -> Vec<TagItem> {
    // Record-level reasons first: they apply to every tag.
    let shared = RecordLabels::check(annotation, policy, sensitive);
    annotation
        .tags
        .iter()
        .enumerate()
        .map(|(index, tag)| decide_tag(record, policy, &shared, index, tag))
        .collect()
}

/// The record's affect and intensity, which every tag carries, and the
/// reasons that apply to every tag of the record.
struct RecordLabels {
    affect: Option<String>,
    affect_confidence: Option<f64>,
    suggested_affect: Option<String>,
    intensity: Option<String>,
    intensity_confidence: Option<f64>,
    suggested_intensity: Option<String>,
    reasons: Vec<Reason>,
    detail: Vec<String>,
}

impl RecordLabels {
    /// Checks the record's labels, their counts and its sensitivity.
    fn check(annotation: &Annotation, policy: &Policy, sensitive: &SensitiveCheck) -> Self {
        let when = &policy.tom_lite_promotion_policy.promote_tags_when;
        let mut reasons = Vec::new();
        let mut detail = Vec::new();
        let (affect, affect_confidence, suggested_affect) = record_label(
            policy,
            Field::Affect,
            when.affect_confidence_min,
            &annotation.affect,
            &mut reasons,
            &mut detail,
        );
        let (intensity, intensity_confidence, suggested_intensity) = record_label(
            policy,
            Field::Intensity,
            when.intensity_confidence_min,
            &annotation.intensity,
            &mut reasons,
            &mut detail,
        );
        check_label_counts(annotation, policy, &mut reasons, &mut detail);
        for reason in &sensitive.reasons {
            add(&mut reasons, *reason);
        }
        detail.extend(sensitive.detail.iter().cloned());
        Self {
            affect,
            affect_confidence,
            suggested_affect,
            intensity,
            intensity_confidence,
            suggested_intensity,
            reasons,
            detail,
        }
    }
}

/// The per-record limits: tom_kinds (and no kind twice), affects, intensities.
fn check_label_counts(
    annotation: &Annotation,
    policy: &Policy,
    reasons: &mut Vec<Reason>,
    detail: &mut Vec<String>,
) {
    let max_kinds = policy.tom_lite.max_tom_kinds_per_memory as usize;
    if annotation.tags.len() > max_kinds {
        add(reasons, Reason::TooManyLabels);
        detail.push(format!(
            "{} tags, at most {max_kinds} per record",
            annotation.tags.len()
        ));
    }
    let kinds: Vec<&str> = annotation
        .tags
        .iter()
        .filter_map(|tag| tag.tom_kind.as_deref())
        .collect();
    if kinds
        .iter()
        .enumerate()
        .any(|(index, kind)| kinds[..index].contains(kind))
    {
        add(reasons, Reason::TooManyLabels);
        detail.push("the same tom_kind is tagged twice".into());
    }
    if annotation.affect.len() > policy.tom_lite.max_affect_labels_per_memory as usize
        || annotation.intensity.len() > 1
    {
        add(reasons, Reason::TooManyLabels);
        detail.push(format!(
            "{} affect and {} intensity labels, at most 1 of each per record",
            annotation.affect.len(),
            annotation.intensity.len()
        ));
    }
}

/// Decides the record's tag number `index`.
fn decide_tag(
    record: &Record,
    policy: &Policy,
    shared: &RecordLabels,
    index: usize,
    tag: &TagCandidate,
) -> TagItem {
    let when = &policy.tom_lite_promotion_policy.promote_tags_when;
    let mut reasons = shared.reasons.clone();
    let mut detail = shared.detail.clone();
    for problem in &tag.problems {
        add(&mut reasons, Reason::UnparseableAnnotation);
        detail.push(problem.clone());
    }
    let suggested_label = check_tom_kind(policy, tag, &mut reasons, &mut detail);
    check_confidence(
        Field::TomKind.name(),
        tag.confidence,
        when.tom_kind_confidence_min,
        &mut reasons,
        &mut detail,
    );
    check_quote(&tag.quote, &record.text, &mut reasons, &mut detail);
    TagItem {
        item_id: format!("{}#tag{index}", record.id),
        tom_kind: tag.tom_kind.clone(),
        confidence: tag.confidence,
        affect: shared.affect.clone(),
        affect_confidence: shared.affect_confidence,
        intensity: shared.intensity.clone(),
        intensity_confidence: shared.intensity_confidence,
        quote: tag.quote.clone(),
        reasons,
        suggested_label,
        suggested_affect: shared.suggested_affect.clone(),
        suggested_intensity: shared.suggested_intensity.clone(),
        detail,
    }
}

/// A tag's tom_kind is one of the policy's; returns the suggestion for a
/// free-form one.
fn check_tom_kind(
    policy: &Policy,
    tag: &TagCandidate,
    reasons: &mut Vec<Reason>,
    detail: &mut Vec<String>,
) -> Option<String> {
    let Some(kind) = &tag.tom_kind else {
        add(reasons, Reason::UnparseableAnnotation);
        detail.push("tag has no tom_kind".into());
        return None;
    };
    let (suggestion, label_detail) = check_label(policy, Field::TomKind, kind)?;
    add(reasons, Reason::FreeformTomLabel);
    detail.push(label_detail);
    suggestion.map(str::to_string)
}

/// Every tag and edge needs its verbatim quote, whatever the policy says
/// (the policy refuses to switch the rule off): a promoted item always has one.
fn check_quote(q: &Quote, text: &str, reasons: &mut Vec<Reason>, detail: &mut Vec<String>) {
    if q.is_absent() {
        add(reasons, Reason::SourceQuoteMissing);
        detail.push("no source quote".into());
    } else if !q.is_verbatim(text) {
        add(reasons, Reason::SourceQuoteMissing);
        detail.push(format!(
            "quote is not verbatim at bytes [{}, {})",
            q.start.map_or("?".into(), |s| s.to_string()),
            q.end.map_or("?".into(), |e| e.to_string())
        ));
    }
}

fn decide_edges(
    record: &Record,
    annotation: &Annotation,
    policy: &Policy,
    nodes: &dyn Nodes,
    sensitive: &SensitiveCheck,
) -> Vec<EdgeItem> {
    let rules = EdgeRules {
        record,
        policy,
        nodes,
        sensitive,
        self_node: format!("memory:{}", record.id),
        candidates: annotation.edges.len(),
    };
    annotation
        .edges
        .iter()
        .enumerate()
        .map(|(index, edge)| rules.decide(index, edge))
        .collect()
}

/// What every edge of one record is checked against.
struct EdgeRules<'a> {
    record: &'a Record,
    policy: &'a Policy,
    nodes: &'a dyn Nodes,
    sensitive: &'a SensitiveCheck,
    /// `memory:<record id>`: an edge's source when it names none.
    self_node: String,
    /// How many edge candidates the record has.
    candidates: usize,
}

impl EdgeRules<'_> {
    /// Decides the record's edge number `index`.
    fn decide(&self, index: usize, edge: &EdgeCandidate) -> EdgeItem {
        let when = &self.policy.tom_lite_promotion_policy.promote_edges_when;
        let mut reasons = Vec::new();
        let mut detail = Vec::new();
        for problem in &edge.problems {
            add(&mut reasons, Reason::UnparseableAnnotation);
            detail.push(problem.clone());
        }
        let max = when.max_edges_per_record as usize;
        if self.candidates > max {
            add(&mut reasons, Reason::MoreThanTwoEdgeCandidates);
            detail.push(format!(
                "{} edge candidates, at most {max} per record",
                self.candidates
            ));
        }
        for reason in &self.sensitive.reasons {
            add(&mut reasons, *reason);
        }
        detail.extend(self.sensitive.detail.iter().cloned());
        let suggested_label = check_relation(self.policy, edge, &mut reasons, &mut detail);
        check_confidence(
            "edge",
            edge.confidence,
            when.edge_confidence_min,
            &mut reasons,
            &mut detail,
        );
        check_quote(&edge.quote, &self.record.text, &mut reasons, &mut detail);
        let source = edge
            .source_node
            .clone()
            .unwrap_or_else(|| self.self_node.clone());
        let pending = self.check_nodes(&source, edge, &mut reasons, &mut detail);
        EdgeItem {
            item_id: format!("{}#edge{index}", self.record.id),
            edge_key: edge_key(
                &source,
                edge.relation.as_deref().unwrap_or(""),
                &target_key(edge),
            ),
            source_node: source,
            relation: edge.relation.clone(),
            target_node: edge.target_node.clone(),
            target_mention: edge.target_mention.clone(),
            confidence: edge.confidence,
            quote: edge.quote.clone(),
            reasons,
            suggested_label,
            detail,
            pending,
        }
    }

    /// Both nodes must exist, whatever the policy says (it refuses
    /// `both_nodes_must_exist: false`); returns the memory nodes that must
    /// still be confirmed when the input ends.
    fn check_nodes(
        &self,
        source: &str,
        edge: &EdgeCandidate,
        reasons: &mut Vec<Reason>,
        detail: &mut Vec<String>,
    ) -> Vec<String> {
        let mut pending = Vec::new();
        self.check_node(source, "source", reasons, detail, &mut pending);
        if let Some(target) = &edge.target_node {
            self.check_node(target, "target", reasons, detail, &mut pending);
        }
        // An edge without a target is never promoted, whatever the policy
        // says of node existence: there is nothing to point at.
        if edge.target_node.is_none() {
            add(reasons, Reason::UnknownTargetNode);
            detail.push(match &edge.target_mention {
                Some(mention) => format!(
                    "no registry node for the mention `{mention}`: add it (or an alias) to the registry"
                ),
                None => "edge has no target node".into(),
            });
        }
        pending
    }

    /// One node of an edge (`role`: source or target) exists, or is a
    /// memory still to come (pushed to `pending`).
    fn check_node(
        &self,
        node: &str,
        role: &str,
        reasons: &mut Vec<Reason>,
        detail: &mut Vec<String>,
        pending: &mut Vec<String>,
    ) {
        if node == self.self_node {
            return;
        }
        match self.nodes.exists(node) {
            Exists::Yes => {}
            Exists::No => {
                add(reasons, Reason::UnknownTargetNode);
                detail.push(format!("{role} node `{node}` does not exist"));
            }
            Exists::Later(id) => pending.push(id),
        }
    }
}

/// An edge's relation is a tom_kind of the policy; returns the suggestion
/// for a free-form one.
fn check_relation(
    policy: &Policy,
    edge: &EdgeCandidate,
    reasons: &mut Vec<Reason>,
    detail: &mut Vec<String>,
) -> Option<String> {
    let Some(relation) = &edge.relation else {
        add(reasons, Reason::UnparseableAnnotation);
        detail.push("edge has no relation".into());
        return None;
    };
    let (suggestion, label_detail) = check_label(policy, Field::TomKind, relation)?;
    add(reasons, Reason::FreeformTomLabel);
    detail.push(label_detail.replacen("tom_kind", "relation", 1));
    suggestion.map(str::to_string)
}

/// The target part of an edge's key. An unresolved target is keyed by its
/// mention, so the same unknown name in the same record keeps its key every
/// night.
fn target_key(edge: &EdgeCandidate) -> String {
    match (&edge.target_node, &edge.target_mention) {
        (Some(target), _) => target.clone(),
        (None, Some(mention)) => format!("?{}", crate::graph::mentions::fold(mention.trim())),
        (None, None) => String::new(),
    }
}

/// A confidence (of `what`: a field or `edge`) at or above `min`.
fn check_confidence(
    what: &str,
    confidence: Option<f64>,
    min: f64,
    reasons: &mut Vec<Reason>,
    detail: &mut Vec<String>,
) {
    match confidence {
        Some(confidence) if confidence >= min => {}
        Some(confidence) => {
            add(reasons, Reason::ConfidenceBelowThreshold);
            detail.push(format!("{what} confidence {confidence} < {min}"));
        }
        None => {
            add(reasons, Reason::ConfidenceBelowThreshold);
            detail.push(format!("{what} has no confidence"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotate::{Annotator, AnnotatorInfo, parse_line};
    use crate::ingest::record::{Origin, RecordKind};
    use tomlite_staging::Digest;

    /// A fake annotator: a fixed annotation line per record id.
    struct Fake(Vec<(&'static str, String)>);

    impl Annotator for Fake {
        fn info(&self) -> AnnotatorInfo {
            AnnotatorInfo {
                id: "fake".into(),
                sha256: "0".into(),
            }
        }
        fn annotation_digest(
            &mut self,
            _: &Record,
        ) -> Result<Digest, crate::annotate::AnnotateError> {
            Ok([0; 16])
        }
        fn annotate(
            &mut self,
            records: &[&Record],
        ) -> Result<Vec<Annotated>, crate::annotate::AnnotateError> {
            Ok(records
                .iter()
                .map(|r| {
                    self.0
                        .iter()
                        .find(|(id, _)| *id == r.id)
                        .map_or(Annotated::Missing, |(_, l)| parse_line(l))
                })
                .collect())
        }
    }

    struct Registry;
    impl Nodes for Registry {
        fn exists(&self, node: &str) -> Exists {
            match node {
                "user:sam" | "memory:r0" => Exists::Yes,
                n if n.starts_with("memory:later") => {
                    Exists::Later(n["memory:".len()..].to_string())
                }
                _ => Exists::No,
            }
        }
    }

    const TEXT: &str = "Sam said: keep answers short. I felt ignored — again.";

    fn record(flags: &[&str]) -> Record {
        Record {
            id: "r1".into(),
            persona_id: "ada".into(),
            kind: RecordKind::Journal,
            source_path: "j.md".into(),
            created_at: "2026-11-28T00:00:00Z".into(),
            text: TEXT.into(),
            flags: flags.iter().map(|s| s.to_string()).collect(),
            user_id: None,
            origin: Origin {
                source: "t".into(),
                line: 1,
            },
        }
    }

    fn tag(kind: &str, conf: f64, quote: &str) -> String {
        let s = TEXT.find(quote).unwrap();
        format!(
            r#"{{"tom_kind":"{kind}","confidence":{conf},"source_quote":"{quote}","quote_start":{s},"quote_end":{}}}"#,
            s + quote.len()
        )
    }

    fn edge(target: &str, conf: f64) -> String {
        let q = "keep answers short.";
        let s = TEXT.find(q).unwrap();
        format!(
            r#"{{"source_node":"memory:r1","relation":"preference","target_node":"{target}","confidence":{conf},"source_quote":"{q}","quote_start":{s},"quote_end":{}}}"#,
            s + q.len()
        )
    }

    fn line(
        tags: &[String],
        edges: &[String],
        affect: (&str, f64),
        intensity: (&str, f64),
    ) -> String {
        format!(
            r#"{{"record_id":"r1","tags":[{}],"edges":[{}],"affect":{{"label":"{}","confidence":{}}},"intensity":{{"label":"{}","confidence":{}}}}}"#,
            tags.join(","),
            edges.join(","),
            affect.0,
            affect.1,
            intensity.0,
            intensity.1
        )
    }

    fn run(line: String, flags: &[&str]) -> Decision {
        let r = record(flags);
        let mut fake = Fake(vec![("r1", line)]);
        let a = fake.annotate(&[&r]).unwrap().remove(0);
        decide(&r, &a, &Policy::default(), &Registry)
    }

    fn items(d: Decision) -> (Vec<TagItem>, Vec<EdgeItem>) {
        match d {
            Decision::Annotated { tags, edges, .. } => (tags, edges),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn thresholds_are_inclusive() {
        let (tags, edges) = items(run(
            line(
                &[tag("preference", 0.80, "keep answers short.")],
                &[edge("user:sam", 0.85)],
                ("neutral", 0.70),
                ("medium", 0.65),
            ),
            &[],
        ));
        assert!(tags[0].reasons.is_empty(), "{:?}", tags[0].detail);
        assert!(edges[0].reasons.is_empty(), "{:?}", edges[0].detail);
    }

    #[test]
    fn every_applicable_reason_is_kept() {
        let mut bad_quote = tag("emotion", 0.5, "I felt ignored");
        bad_quote = bad_quote.replace("\"quote_start\":", "\"quote_start\":1");
        let (tags, _) = items(run(
            line(&[bad_quote], &[], ("sad", 0.9), ("high", 0.9)),
            &["safety"],
        ));
        assert_eq!(
            tags[0].reasons,
            [
                Reason::ConfidenceBelowThreshold,
                Reason::SourceQuoteMissing,
                Reason::SensitiveBoundaryOrSafetyRecord
            ]
        );
    }

    #[test]
    fn free_form_labels_carry_a_suggestion() {
        let (tags, _) = items(run(
            line(
                &[tag("Preference", 0.9, "keep answers short.")],
                &[],
                ("frustrated", 0.9),
                ("moderate", 0.9),
            ),
            &[],
        ));
        assert_eq!(tags[0].reasons, [Reason::FreeformTomLabel]);
        assert_eq!(tags[0].suggested_label.as_deref(), Some("preference"));
        assert_eq!(tags[0].suggested_affect.as_deref(), Some("angry"));
        assert_eq!(tags[0].suggested_intensity.as_deref(), Some("medium"));
    }

    #[test]
    fn three_tags_all_get_too_many_labels() {
        let t = [
            tag("preference", 0.9, "keep answers short."),
            tag("emotion", 0.9, "I felt ignored"),
            tag("relationship", 0.9, "Sam said"),
        ];
        let (tags, _) = items(run(line(&t, &[], ("sad", 0.9), ("high", 0.9)), &[]));
        assert!(tags.iter().all(|t| t.reasons == [Reason::TooManyLabels]));
    }

    #[test]
    fn three_edges_all_get_more_than_two_and_unknown_targets_are_named() {
        let e = [
            edge("user:sam", 0.9),
            edge("user:priya", 0.9),
            edge("memory:r0", 0.9),
        ];
        let (_, edges) = items(run(line(&[], &e, ("sad", 0.9), ("high", 0.9)), &[]));
        assert_eq!(edges[0].reasons, [Reason::MoreThanTwoEdgeCandidates]);
        assert_eq!(
            edges[1].reasons,
            [Reason::UnknownTargetNode, Reason::MoreThanTwoEdgeCandidates]
        );
        assert_eq!(edges[2].reasons, [Reason::MoreThanTwoEdgeCandidates]);
    }

    #[test]
    fn forward_memory_targets_wait_for_the_end_of_the_input() {
        let (_, mut edges) = items(run(
            line(
                &[],
                &[edge("memory:later-1", 0.9)],
                ("sad", 0.9),
                ("high", 0.9),
            ),
            &[],
        ));
        assert_eq!(edges[0].pending, ["later-1"]);
        assert!(edges[0].reasons.is_empty());
        edges[0].resolve(|_| false);
        assert_eq!(edges[0].reasons, [Reason::UnknownTargetNode]);
    }

    #[test]
    fn a_policy_built_in_code_cannot_switch_off_quotes_or_node_checks() {
        let mut p = Policy::default();
        p.tom_lite.require_source_anchor = false;
        p.tom_lite_promotion_policy
            .promote_tags_when
            .source_quote_required = false;
        p.tom_lite_promotion_policy
            .promote_edges_when
            .source_quote_required = false;
        p.tom_lite_promotion_policy
            .promote_edges_when
            .both_nodes_must_exist = false;
        let no_quote = r#"{"tom_kind":"preference","confidence":0.9}"#.to_string();
        let r = record(&[]);
        let mut fake = Fake(vec![(
            "r1",
            line(
                &[no_quote],
                &[edge("user:nobody-at-all", 0.9)],
                ("sad", 0.9),
                ("high", 0.9),
            ),
        )]);
        let a = fake.annotate(&[&r]).unwrap().remove(0);
        let (tags, edges) = items(decide(&r, &a, &p, &Registry));
        assert_eq!(tags[0].reasons, [Reason::SourceQuoteMissing]);
        assert_eq!(edges[0].reasons, [Reason::UnknownTargetNode]);
    }

    fn with_sensitive(category: &str, confidence: f64, quote: &str) -> String {
        let s = TEXT.find(quote).unwrap();
        let l = line(
            &[tag("preference", 0.9, "keep answers short.")],
            &[edge("user:sam", 0.9)],
            ("sad", 0.9),
            ("high", 0.9),
        );
        format!(
            r#"{},"sensitive":{{"category":"{category}","confidence":{confidence},"quote":"{quote}","quote_start":{s},"quote_end":{},"detector":"model"}}}}"#,
            &l[..l.len() - 1],
            s + quote.len()
        )
    }

    #[test]
    fn a_detection_quarantines_every_tag_and_edge_and_makes_a_sensitive_record() {
        let d = run(
            with_sensitive("mental_health_self_harm", 0.93, "I felt ignored"),
            &[],
        );
        let Decision::Annotated {
            tags,
            edges,
            sensitive,
            ..
        } = d
        else {
            panic!("{d:?}")
        };
        let s = TEXT.find("I felt ignored").unwrap();
        let want = format!(
            "sensitive content detected: mental_health_self_harm (confidence 0.93, model) in \"I felt ignored\" at bytes [{s}, {})",
            s + "I felt ignored".len()
        );
        for (reasons, detail) in tags
            .iter()
            .map(|t| (&t.reasons, &t.detail))
            .chain(edges.iter().map(|e| (&e.reasons, &e.detail)))
        {
            assert_eq!(reasons, &[Reason::SensitiveBoundaryOrSafetyRecord]);
            assert_eq!(detail, std::slice::from_ref(&want));
        }
        let s = sensitive.unwrap();
        assert!(s.safety && s.flags.is_empty());
        assert_eq!(
            s.detection.unwrap().category.as_deref(),
            Some("mental_health_self_harm")
        );
    }

    #[test]
    fn a_detection_under_the_threshold_changes_nothing() {
        let d = run(with_sensitive("health", 0.34, "I felt ignored"), &[]);
        let Decision::Annotated {
            tags,
            edges,
            sensitive,
            ..
        } = d
        else {
            panic!("{d:?}")
        };
        assert!(tags[0].reasons.is_empty() && edges[0].reasons.is_empty());
        assert_eq!(sensitive, None);
    }

    #[test]
    fn a_flag_keeps_its_detail_and_a_detection_adds_its_own() {
        let (tags, _) = items(run(
            with_sensitive("health", 0.5, "I felt ignored"),
            &["sensitive"],
        ));
        assert_eq!(tags[0].reasons, [Reason::SensitiveBoundaryOrSafetyRecord]);
        assert_eq!(tags[0].detail[0], "record is flagged sensitive");
        assert!(tags[0].detail[1].starts_with("sensitive content detected: health"));
    }

    #[test]
    fn an_unknown_category_is_unparseable_naming_the_field() {
        let (tags, edges) = items(run(with_sensitive("medical", 0.9, "I felt ignored"), &[]));
        assert_eq!(tags[0].reasons, [Reason::UnparseableAnnotation]);
        assert_eq!(edges[0].reasons, [Reason::UnparseableAnnotation]);
        assert!(tags[0].detail[0].starts_with("sensitive.category: `medical`"));
    }

    #[test]
    fn edge_keys_are_deterministic_and_distinct() {
        let a = edge_key("memory:r1", "preference", "user:sam");
        assert_eq!(a, edge_key("memory:r1", "preference", "user:sam"));
        assert_ne!(a, edge_key("memory:r1", "preference", "user:sa"));
        // Length-prefixing: no two splits of the same bytes collide.
        assert_ne!(edge_key("ab", "c", "d"), edge_key("a", "bc", "d"));
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn missing_and_unparseable_annotations() {
        let r = record(&[]);
        let mut fake = Fake(vec![]);
        let a = fake.annotate(&[&r]).unwrap().remove(0);
        assert_eq!(
            decide(&r, &a, &Policy::default(), &Registry),
            Decision::Missing
        );
        assert!(matches!(
            run("{\"record_id\":\"r1\",".into(), &[]),
            Decision::Unparseable { .. }
        ));
    }
}
