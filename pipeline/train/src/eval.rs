//! `tomlite eval`: the classifier measured as the job runs it, on labeled
//! records (heads, tags, the policy's promotions, edges) and on a
//! GoEmotions split (the affect head).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;
use tomlite_models::data::{LabeledRecord, read_goemotions, read_labeled};
use tomlite_models::metrics::{LabelScore, classification_report, ece, multilabel_report};

use crate::error::LearnError;
use crate::split::HELD_OUT_STYLES;
use crate::split::is_held_out;
use tomlite_core::annotate::Annotation;
use tomlite_core::annotate::classifier::{Classifier, Scores};
use tomlite_core::graph::nodes::Registry;
use tomlite_core::ingest::record::{Origin, Record, RecordKind};
use tomlite_core::rules::decide::{Decision, Nodes, decide};
use tomlite_core::rules::policy::Policy;

/// `tomlite eval` results.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// Per data set.
    pub sets: Vec<serde_json::Value>,
}

/// Nodes as `tomlite eval` sees them: the registry's, and every labeled
/// record as a memory.
struct EvalNodes<'a> {
    registry: Option<&'a Registry>,
    memories: std::collections::HashSet<&'a str>,
}

impl Nodes for EvalNodes<'_> {
    fn exists(&self, node: &str) -> tomlite_core::rules::decide::Exists {
        let yes = match node.strip_prefix("memory:") {
            Some(id) => self.memories.contains(id),
            None => self.registry.is_some_and(|r| r.contains(node)),
        };
        if yes {
            tomlite_core::rules::decide::Exists::Yes
        } else {
            tomlite_core::rules::decide::Exists::No
        }
    }
}

/// Edge figures of `tomlite eval`, accumulated record by record.
#[derive(Default)]
struct EdgeEval {
    gold_mentions: usize,
    mentions_proposed: usize,
    mentions_promoted: usize,
    /// Proposed registry edges: (confidence, target and relation right).
    registry_conf: Vec<(f64, bool)>,
    registry_proposed_right: usize,
    registry_promoted: usize,
    registry_promoted_right: usize,
    gold_unknown: usize,
    unknown_found: usize,
    unknown_edges: usize,
    false_unknowns: usize,
    false_unknown_examples: Vec<String>,
    gold_links: usize,
    memory_proposed: usize,
    memory_proposed_right: usize,
    memory_promoted: usize,
    memory_promoted_right: usize,
    over_limit_records: usize,
}

impl EdgeEval {
    fn add(&mut self, r: &LabeledRecord, edges: &[tomlite_core::rules::decide::EdgeItem]) {
        use crate::edges::same_name;
        let g = &r.gold;
        if !g.people_labeled {
            return;
        }
        self.gold_mentions += g.mentions.len();
        self.gold_unknown += g.unknown_mentions.len();
        self.gold_links += g.links_to.len();
        if edges.len() > 2 {
            self.over_limit_records += 1;
        }
        let promoted = |e: &tomlite_core::rules::decide::EdgeItem| e.reasons.is_empty();
        let rel_right = |e: &tomlite_core::rules::decide::EdgeItem| {
            e.relation.as_ref().is_some_and(|k| g.tom_kinds.contains(k))
        };
        for m in &g.mentions {
            let hit = |only_promoted: bool| {
                edges.iter().any(|e| {
                    e.target_node.as_deref() == Some(m.as_str()) && (!only_promoted || promoted(e))
                })
            };
            self.mentions_proposed += usize::from(hit(false));
            self.mentions_promoted += usize::from(hit(true));
        }
        for u in &g.unknown_mentions {
            self.unknown_found += usize::from(edges.iter().any(|e| {
                e.target_node.is_none()
                    && e.target_mention.as_deref().is_some_and(|t| same_name(t, u))
            }));
        }
        for e in edges {
            match e.target_node.as_deref() {
                Some(t) if t.starts_with("memory:") => {
                    let right = g.links_to.iter().any(|l| t == format!("memory:{l}"));
                    self.memory_proposed += 1;
                    self.memory_proposed_right += usize::from(right);
                    if promoted(e) {
                        self.memory_promoted += 1;
                        self.memory_promoted_right += usize::from(right);
                    }
                }
                Some(t) => {
                    let right = g.mentions.iter().any(|m| m == t);
                    self.registry_conf
                        .push((e.confidence.unwrap_or(0.0), right && rel_right(e)));
                    self.registry_proposed_right += usize::from(right);
                    if promoted(e) {
                        self.registry_promoted += 1;
                        self.registry_promoted_right += usize::from(right);
                    }
                }
                None => {
                    self.unknown_edges += 1;
                    let name = e.target_mention.as_deref().unwrap_or("");
                    let known = g
                        .unknown_mentions
                        .iter()
                        .chain(&g.people)
                        .any(|u| same_name(name, u));
                    if !known {
                        self.false_unknowns += 1;
                        if self.false_unknown_examples.len() < 40 {
                            self.false_unknown_examples
                                .push(format!("{}: {name}", r.id));
                        }
                    }
                }
            }
        }
    }

    fn report(&self, records: usize) -> serde_json::Value {
        let ratio = |a: usize, b: usize| {
            if b == 0 {
                serde_json::Value::Null
            } else {
                json!(a as f64 / b as f64)
            }
        };
        let (conf, ok): (Vec<f64>, Vec<bool>) = self.registry_conf.iter().copied().unzip();
        json!({
            "registry": {
                "gold_mentions": self.gold_mentions,
                "proposed": self.registry_conf.len(),
                "proposed_precision": ratio(self.registry_proposed_right, self.registry_conf.len()),
                "proposed_recall": ratio(self.mentions_proposed, self.gold_mentions),
                "promoted": self.registry_promoted,
                "edge_precision": ratio(self.registry_promoted_right, self.registry_promoted),
                "edge_recall": ratio(self.mentions_promoted, self.gold_mentions),
                "confidence_ece": ece(&conf, &ok, 10),
                "edge_right_rate": ratio(ok.iter().filter(|&&b| b).count(), ok.len()),
            },
            "unknown": {
                "gold_unknown_mentions": self.gold_unknown,
                "unknown_recall": ratio(self.unknown_found, self.gold_unknown),
                "unknown_edges": self.unknown_edges,
                "false_unknowns": self.false_unknowns,
                "false_unknowns_per_100_records": self.false_unknowns as f64 * 100.0 / records.max(1) as f64,
                "false_unknown_examples": self.false_unknown_examples,
            },
            "memory": {
                "gold_links": self.gold_links,
                "proposed": self.memory_proposed,
                "proposed_precision": ratio(self.memory_proposed_right, self.memory_proposed),
                "recall": ratio(self.memory_proposed_right, self.gold_links),
                "promoted": self.memory_promoted,
                "promoted_precision": ratio(self.memory_promoted_right, self.memory_promoted),
            },
            "records_over_the_edge_limit": self.over_limit_records,
        })
    }
}

/// `a / b`, `null` when `b` is 0.
fn ratio(a: usize, b: usize) -> serde_json::Value {
    if b == 0 {
        serde_json::Value::Null
    } else {
        json!(a as f64 / b as f64)
    }
}

/// Scores of one head against gold labels: `conf` calibrated, `raw` the
/// same predictions' confidence before calibration (temperature 1).
fn head_report(
    labels: &[String],
    gold: &[usize],
    pred: &[usize],
    conf: &[f64],
    raw: &[f64],
) -> serde_json::Value {
    let l: Vec<&str> = labels.iter().map(String::as_str).collect();
    let (per, macro_f1): (Vec<LabelScore>, f64) = classification_report(&l, gold, pred);
    let correct: Vec<bool> = pred.iter().zip(gold).map(|(p, g)| p == g).collect();
    json!({"n": gold.len(), "macro_f1": macro_f1, "accuracy": correct.iter().filter(|&&c| c).count() as f64 / correct.len().max(1) as f64,
           "ece_before": ece(raw, &correct, 15), "ece_after": ece(conf, &correct, 15), "per_label": per})
}

fn raw_conf(logits: &[f32]) -> f64 {
    tomlite_models::metrics::softmax_t(logits, 1.0)
        .into_iter()
        .fold(0.0, f64::max)
}

/// A single-label head's predictions against gold, record by record.
#[derive(Default)]
struct SingleLabelEval {
    gold: Vec<usize>,
    predicted: Vec<usize>,
    /// Calibrated confidence of the prediction.
    confidence: Vec<f64>,
    /// The same prediction's confidence at temperature 1.
    raw_confidence: Vec<f64>,
}

impl SingleLabelEval {
    /// Adds one record; whether its prediction is the gold label.
    fn add(&mut self, gold: usize, probabilities: &[f32], logits: &[f32]) -> bool {
        let (predicted, confidence) = tomlite_models::metrics::argmax(probabilities);
        self.gold.push(gold);
        self.predicted.push(predicted);
        self.confidence.push(f64::from(confidence));
        self.raw_confidence.push(raw_conf(logits));
        predicted == gold
    }

    fn report(&self, labels: &[String]) -> serde_json::Value {
        head_report(
            labels,
            &self.gold,
            &self.predicted,
            &self.confidence,
            &self.raw_confidence,
        )
    }
}

/// Confidences and whether each was right: what an ECE reads.
#[derive(Default)]
struct Reliability {
    confidence: Vec<f64>,
    right: Vec<bool>,
}

impl Reliability {
    fn add(&mut self, confidence: f64, right: bool) {
        self.confidence.push(confidence);
        self.right.push(right);
    }

    fn ece(&self, bins: usize) -> f64 {
        ece(&self.confidence, &self.right, bins)
    }
}

/// The tom_kind head's tags against the gold kinds, record by record.
#[derive(Default)]
struct TomKindEval {
    gold: Vec<Vec<usize>>,
    predicted: Vec<Vec<usize>>,
    abstained: usize,
    /// Records with at least one gold kind.
    with_kinds: usize,
    /// Of those, the ones whose primary tag is the gold primary.
    primary_right: usize,
    /// Of those, the ones whose most likely kind (by the calibrated
    /// P(right), abstention or not) is the gold primary.
    argmax_right: usize,
    /// Records with at least one gold kind on which the head abstained.
    abstained_with_kinds: usize,
    /// Every (record, kind) decision before calibration.
    before: Reliability,
    /// Every (record, kind) decision after calibration.
    after: Reliability,
}

/// How a record with a gold kind came out.
struct KindOutcome {
    /// Its primary tag's kind is the gold primary (an abstention is a miss).
    primary_right: bool,
    /// Its most likely kind is the gold primary.
    argmax_right: bool,
}

impl TomKindEval {
    /// Adds one record; for a record with a gold kind, how it came out.
    fn add(&mut self, gold: Vec<usize>, predicted: Vec<usize>, s: &Scores) -> Option<KindOutcome> {
        if predicted.is_empty() {
            self.abstained += 1;
        }
        let outcome = gold.first().map(|&primary| {
            let argmax = s
                .tom_kind
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i);
            KindOutcome {
                primary_right: predicted.first() == Some(&primary),
                argmax_right: argmax == Some(primary),
            }
        });
        if let Some(o) = &outcome {
            self.with_kinds += 1;
            self.primary_right += usize::from(o.primary_right);
            self.argmax_right += usize::from(o.argmax_right);
            if predicted.is_empty() {
                self.abstained_with_kinds += 1;
            }
        }
        for (i, (&p_cal, &z)) in s.tom_kind.iter().zip(&s.logits[0]).enumerate() {
            let is = gold.contains(&i);
            for (p, reliability) in [
                (f64::from(p_cal), &mut self.after),
                (tomlite_models::metrics::sigmoid_t(z, 1.0), &mut self.before),
            ] {
                reliability.add(if p >= 0.5 { p } else { 1.0 - p }, (p >= 0.5) == is);
            }
        }
        self.gold.push(gold);
        self.predicted.push(predicted);
        outcome
    }

    fn report(&self, labels: &[String]) -> serde_json::Value {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let (per, macro_f1) = multilabel_report(&labels, &self.gold, &self.predicted);
        json!({"macro_f1": macro_f1, "per_label": per, "abstained": self.abstained,
               "primary_right": ratio(self.primary_right, self.with_kinds),
               "records_with_kinds": self.with_kinds,
               "abstained_with_kinds": self.abstained_with_kinds,
               "primary_right_argmax": ratio(self.argmax_right, self.with_kinds),
               "ece_before": self.before.ece(15), "ece_after": self.after.ece(15)})
    }
}

/// What the policy promotes of the classifier's tags, record by record.
#[derive(Default)]
struct PolicyEval {
    promoted: usize,
    promoted_right: usize,
    /// Records with gold kinds and at least one promoted tag.
    covered: usize,
    promoted_on_no_signal: usize,
    /// Promoted tags with a quote and a gold quote of their kind.
    quotes: usize,
    /// Of those, the quotes that overlap the gold quote.
    quote_hits: usize,
    /// Promoted tags whose record's affect is the gold one.
    promoted_affect_right: usize,
    /// Promoted tags whose record's intensity is the gold one.
    promoted_intensity_right: usize,
    /// Promoted tags right on the kind, the affect and the intensity.
    promoted_all_right: usize,
    /// Records with gold kinds whose best kind, affect and intensity pass
    /// their gates, and all three together.
    gate_kind: usize,
    gate_affect: usize,
    gate_intensity: usize,
    gate_all: usize,
}

/// The confidences the promotion gates read, and whether the record's
/// affect and intensity are the gold ones.
struct Gates {
    best_kind: f64,
    affect: f64,
    intensity: f64,
    affect_right: bool,
    intensity_right: bool,
}

impl PolicyEval {
    fn add(
        &mut self,
        r: &LabeledRecord,
        tags: &[tomlite_core::rules::decide::TagItem],
        has_gold: bool,
        (gates, policy): (&Gates, &Policy),
    ) {
        let when = &policy.tom_lite_promotion_policy.promote_tags_when;
        if has_gold {
            let k = gates.best_kind >= when.tom_kind_confidence_min;
            let a = gates.affect >= when.affect_confidence_min;
            let i = gates.intensity >= when.intensity_confidence_min;
            self.gate_kind += usize::from(k);
            self.gate_affect += usize::from(a);
            self.gate_intensity += usize::from(i);
            self.gate_all += usize::from(k && a && i);
        }
        let mut any = false;
        for t in tags.iter().filter(|t| t.reasons.is_empty()) {
            any = true;
            self.promoted += 1;
            let kind = t.tom_kind.as_deref().unwrap_or("");
            let kind_right = r.gold.tom_kinds.iter().any(|g| g == kind);
            self.promoted_right += usize::from(kind_right);
            self.promoted_affect_right += usize::from(gates.affect_right);
            self.promoted_intensity_right += usize::from(gates.intensity_right);
            self.promoted_all_right +=
                usize::from(kind_right && gates.affect_right && gates.intensity_right);
            if !has_gold {
                self.promoted_on_no_signal += 1;
            }
            // The quote supports the kind when it overlaps that kind's gold quote.
            if let Some(gold_quote) = r
                .gold
                .tom_kinds
                .iter()
                .position(|g| g == kind)
                .and_then(|i| r.gold.source_quotes.get(i))
                && let (Some(start), Some(end)) = (t.quote.start, t.quote.end)
            {
                self.quotes += 1;
                if let Some(gold_start) = r.text.find(gold_quote.as_str()) {
                    let gold_end = gold_start + gold_quote.len();
                    if (start as usize) < gold_end && gold_start < end as usize {
                        self.quote_hits += 1;
                    }
                }
            }
        }
        if any && has_gold {
            self.covered += 1;
        }
    }

    fn report(&self, with_kinds: usize) -> serde_json::Value {
        json!({
            "promoted_tags": self.promoted,
            "promoted_tag_precision": ratio(self.promoted_right, self.promoted),
            "promoted_affect_precision": ratio(self.promoted_affect_right, self.promoted),
            "promoted_intensity_precision": ratio(self.promoted_intensity_right, self.promoted),
            "promoted_all_three_precision": ratio(self.promoted_all_right, self.promoted),
            "gates": {
                "best_kind": ratio(self.gate_kind, with_kinds),
                "affect": ratio(self.gate_affect, with_kinds),
                "intensity": ratio(self.gate_intensity, with_kinds),
                "all_three": ratio(self.gate_all, with_kinds),
            },
            "coverage": ratio(self.covered, with_kinds),
            "promoted_on_no_signal_records": self.promoted_on_no_signal,
            "quote_overlaps_gold": ratio(self.quote_hits, self.quotes),
        })
    }
}

/// Everything `tomlite eval` measures on labeled records.
struct RecordsEval<'a> {
    policy: &'a Policy,
    nodes: EvalNodes<'a>,
    /// The `source_path` of the records as the job would read them.
    path: &'a Path,
    tom_labels: Vec<String>,
    affect_labels: Vec<String>,
    intensity_labels: Vec<String>,
    tom_kind: TomKindEval,
    affect: SingleLabelEval,
    intensity: SingleLabelEval,
    /// Every tag the classifier emits: its confidence and whether it is right.
    tags: Reliability,
    promotions: PolicyEval,
    /// Records the sensitive content detector flags (these ToM-lite records
    /// are not labeled for sensitivity: a rate to watch, not an error rate).
    sensitive_detected: usize,
    edges: EdgeEval,
    /// The records of each style (records that name one).
    by_style: std::collections::BTreeMap<String, StyleEval>,
}

/// One style's records: how often each field is right.
#[derive(Default)]
struct StyleEval {
    records: usize,
    with_kinds: usize,
    /// The primary tag is the gold primary (an abstention is a miss).
    primary_right: usize,
    /// The most likely kind is the gold primary.
    argmax_right: usize,
    affect_right: usize,
    intensity_right: usize,
}

impl StyleEval {
    fn report(&self) -> serde_json::Value {
        json!({
            "records": self.records,
            "records_with_kinds": self.with_kinds,
            "primary_right": ratio(self.primary_right, self.with_kinds),
            "primary_right_argmax": ratio(self.argmax_right, self.with_kinds),
            "affect_right": ratio(self.affect_right, self.records),
            "intensity_right": ratio(self.intensity_right, self.records),
        })
    }
}

impl RecordsEval<'_> {
    /// The record as the job would read it.
    fn record(&self, r: &LabeledRecord) -> Record {
        Record {
            id: r.id.clone(),
            persona_id: r.persona_id.clone(),
            kind: RecordKind::Journal,
            source_path: self.path.display().to_string(),
            created_at: r.created_at.clone(),
            text: r.text.clone(),
            flags: Vec::new(),
            user_id: None,
            origin: Origin {
                source: self.path.display().to_string(),
                line: 0,
            },
        }
    }

    fn add(&mut self, clf: &Classifier, r: &LabeledRecord, s: &Scores) {
        let rec = self.record(r);
        let ann = clf.annotation(&rec, s);
        let position = |labels: &[String], label: &str| labels.iter().position(|l| l == label);
        let gold_kinds: Vec<usize> = r
            .gold
            .tom_kinds
            .iter()
            .filter_map(|k| position(&self.tom_labels, k))
            .collect();
        let predicted_kinds: Vec<usize> = ann
            .tags
            .iter()
            .filter_map(|t| {
                t.tom_kind
                    .as_ref()
                    .and_then(|k| position(&self.tom_labels, k))
            })
            .collect();
        if ann.sensitive.is_some() {
            self.sensitive_detected += 1;
        }
        for t in &ann.tags {
            if let (Some(k), Some(c)) = (&t.tom_kind, t.confidence) {
                self.tags.add(c, r.gold.tom_kinds.contains(k));
            }
        }
        let affect_right = position(&self.affect_labels, &r.gold.affect)
            .is_some_and(|g| self.affect.add(g, &s.affect, &s.logits[1]));
        let intensity_right = position(&self.intensity_labels, &r.gold.intensity)
            .is_some_and(|g| self.intensity.add(g, &s.intensity, &s.logits[2]));
        let gates = Gates {
            best_kind: ann
                .tags
                .first()
                .and_then(|t| t.confidence)
                .or(ann.best.as_ref().map(|b| b.1))
                .unwrap_or(0.0),
            affect: ann.affect.first().and_then(|a| a.confidence).unwrap_or(0.0),
            intensity: ann
                .intensity
                .first()
                .and_then(|a| a.confidence)
                .unwrap_or(0.0),
            affect_right,
            intensity_right,
        };
        self.add_decision(r, &rec, ann, (!gold_kinds.is_empty(), &gates));
        let kinds = self.tom_kind.add(gold_kinds, predicted_kinds, s);
        if let Some(style) = &r.style {
            let e = self.by_style.entry(style.clone()).or_default();
            e.records += 1;
            e.affect_right += usize::from(affect_right);
            e.intensity_right += usize::from(intensity_right);
            if let Some(k) = kinds {
                e.with_kinds += 1;
                e.primary_right += usize::from(k.primary_right);
                e.argmax_right += usize::from(k.argmax_right);
            }
        }
    }

    /// What the policy decides on the annotation: promotions and edges.
    fn add_decision(
        &mut self,
        r: &LabeledRecord,
        rec: &Record,
        ann: Annotation,
        (has_gold, gates): (bool, &Gates),
    ) {
        let annotated = tomlite_core::annotate::Annotated::Parsed(ann);
        if let Decision::Annotated { tags, edges, .. } =
            decide(rec, &annotated, self.policy, &self.nodes)
        {
            if self.nodes.registry.is_some() {
                self.edges.add(r, &edges);
            }
            self.promotions
                .add(r, &tags, has_gold, (gates, self.policy));
        }
    }

    fn report(&self, records: usize) -> serde_json::Value {
        let tags = &self.tags;
        let sure = |&(&c, _): &(&f64, &bool)| c >= 0.8;
        let sure_tags = tags.confidence.iter().zip(&tags.right).filter(sure);
        json!({
            "records": records,
            "sensitive_detected": self.sensitive_detected,
            "tom_kind": self.tom_kind.report(&self.tom_labels),
            "affect": self.affect.report(&self.affect_labels),
            "intensity": self.intensity.report(&self.intensity_labels),
            "tags": {
                "n": tags.confidence.len(),
                "precision": ratio(tags.right.iter().filter(|&&b| b).count(), tags.right.len()),
                "ece": tags.ece(10),
                "at_or_above_0_8": {
                    "n": sure_tags.clone().count(),
                    "precision": ratio(sure_tags.clone().filter(|(_, ok)| **ok).count(), sure_tags.count()),
                },
            },
            "policy": self.promotions.report(self.tom_kind.with_kinds),
            "by_style": self
                .by_style
                .iter()
                .map(|(k, v)| (k.clone(), v.report()))
                .collect::<serde_json::Map<_, _>>(),
            "edges": if self.nodes.registry.is_some() { self.edges.report(records) } else { serde_json::Value::Null },
        })
    }
}

/// Gives the classifier every record of `pool` as a committed memory, with
/// its time, and the registry when there is one.
fn load_memories(
    clf: &mut Classifier,
    pool: &[LabeledRecord],
    registry: Option<&Registry>,
) -> Result<(), LearnError> {
    if let Some(reg) = registry {
        clf.set_registry(reg);
    }
    let texts: Vec<&str> = pool.iter().map(|r| r.text.as_str()).collect();
    let mut index = tomlite_core::graph::memory::MemoryIndex::default();
    for (r, v) in pool.iter().zip(clf.embed(&texts)?) {
        index.add(
            &r.id,
            &r.persona_id,
            tomlite_core::graph::memory::quantize(&v),
        );
    }
    index.sort();
    clf.set_memories(index);
    clf.set_memory_times(
        pool.iter()
            .map(|r| (r.id.clone(), r.created_at.clone()))
            .collect(),
    );
    Ok(())
}

/// Evaluates the classifier, as the job would run it, on labeled records.
///
/// With a registry, edges too: every labeled record of the files is a
/// memory that a record written after it (same persona) may link to.
pub fn eval_records(
    clf: &mut Classifier,
    paths: &[PathBuf],
    policy: &Policy,
    dev_only: bool,
    registry: Option<&Registry>,
) -> Result<serde_json::Value, LearnError> {
    let mut pool: Vec<LabeledRecord> = Vec::new();
    for p in paths {
        pool.extend(read_labeled(p)?);
    }
    let records: Vec<LabeledRecord> = pool
        .iter()
        .filter(|r| !dev_only || is_held_out(r))
        .cloned()
        .collect();
    load_memories(clf, &pool, registry)?;
    let mut eval = RecordsEval {
        policy,
        nodes: EvalNodes {
            registry,
            memories: pool.iter().map(|r| r.id.as_str()).collect(),
        },
        path: paths.first().map(PathBuf::as_path).unwrap_or(Path::new("")),
        tom_labels: clf.tom_labels().to_vec(),
        affect_labels: clf.affect_labels().to_vec(),
        intensity_labels: clf.intensity_labels().to_vec(),
        tom_kind: TomKindEval::default(),
        affect: SingleLabelEval::default(),
        intensity: SingleLabelEval::default(),
        tags: Reliability::default(),
        promotions: PolicyEval::default(),
        sensitive_detected: 0,
        edges: EdgeEval::default(),
        by_style: Default::default(),
    };
    for chunk in records.chunks(64) {
        let texts: Vec<&str> = chunk.iter().map(|r| r.text.as_str()).collect();
        let scores = clf.score(&texts)?;
        for (r, s) in chunk.iter().zip(&scores) {
            eval.add(clf, r, s);
        }
    }
    let mut report = eval.report(records.len());
    if let Some(fields) = report.as_object_mut() {
        fields.insert(
            "data".into(),
            json!(
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        fields.insert("split".into(), json!(if dev_only { "dev" } else { "all" }));
        fields.insert("held_out_styles".into(), json!(HELD_OUT_STYLES));
    }
    Ok(report)
}

/// Evaluates the affect head on a GoEmotions TSV split.
pub fn eval_goemotions(clf: &mut Classifier, tsv: &Path) -> Result<serde_json::Value, LearnError> {
    let examples = read_goemotions(tsv)?;
    let labels: Vec<String> = clf.affect_labels().to_vec();
    let mut affect = SingleLabelEval::default();
    for chunk in examples.chunks(256) {
        let texts: Vec<&str> = chunk.iter().map(|e| e.text.as_str()).collect();
        for (e, s) in chunk.iter().zip(clf.score(&texts)?) {
            let gold = labels.iter().position(|l| l == e.affect).unwrap_or(0);
            affect.add(gold, &s.affect, &s.logits[1]);
        }
    }
    Ok(json!({"data": tsv.display().to_string(), "affect": affect.report(&labels)}))
}
