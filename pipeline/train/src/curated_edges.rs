//! What the curator's edge decisions teach the edge model
//! (`tomlite train --curated`).
//!
//! An edge of a registry node or of an unknown person has the confidence
//! `P(target right) · P(relation right | p_kind)`: the target part is the
//! registry-link prior of its case class (`link_exact_case`,
//! `link_other_case`) or the person head's P(person), the relation part
//! the relation calibration `mention` on `logit(p_kind)`. A decision speaks
//! of these parts:
//!
//! - **accepted**: the relation and the target were right;
//! - **relabelled**: the relation was right when the curator kept it,
//!   wrong when they changed it; the target likewise. An unknown-person
//!   edge (no target, or one outside the run's registry) given a registry
//!   node says its mention is a person;
//! - **rejected**: the edge was wrong, but not which part. A rejected
//!   registry edge is read the way the model itself finds more likely: the
//!   target right and the relation wrong when `P(link right | edge wrong) =
//!   p_link·(1 − r) / (1 − p_link·r)` reaches one half (`p_link` and `r`
//!   from the training data alone), else the link wrong. A rejected
//!   unknown-person edge is not used: it may be a person with a wrong
//!   relation, someone who is no person, or a person the curator chose not
//!   to add.
//!
//! So each decision gives up to three rows: a relation row
//! (`(logit(p_kind), relation right)`, beside the training edges whose
//! target is right), a registry-link count in its case class (a registry
//! match of the target's node at the edge's mention, in the run's
//! registry), and a person example (the mention's candidate span in its
//! record, a positive). `p_kind` is the tom_kind head's probability of the
//! proposed relation on the edge's quote, from the bag's members that did
//! not draw the record's curated tags (the head's out-of-bag score). The
//! person examples join the person head's training rows only: its
//! temperature and `person_min` stay fitted on the training candidates'
//! out-of-bag scores. The link priors and the relation calibration are
//! fitted on the training rows and these together (that is the point);
//! neither has a threshold measured on them. Memory links are not used:
//! their calibration reads the cosine to the linked memory, which the
//! curated table does not keep.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use tomlite_models::heads::Head;
use tomlite_models::metrics::{logit, sigmoid_t};
use tomlite_models::{Encoder, Rows};

use crate::error::LearnError;
use tomlite_core::curate::CuratedRow;
use tomlite_core::graph::mentions::{CANDIDATE_FEATURES, Linker, candidates};
use tomlite_core::graph::nodes::Registry;
use tomlite_core::segment::sentences;
use tomlite_core::vocab::TOM_KINDS;

/// What a decision says of the edge as proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Accepted or relabelled: whether the proposed relation and the
    /// proposed target were kept.
    Decided {
        relation_right: bool,
        target_right: bool,
    },
    /// Rejected: the edge was wrong, whichever part.
    Rejected,
}

/// One edge decision as the edge model reads it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct EdgeDecision {
    pub(super) run_id: String,
    pub(super) record_text: String,
    /// The edge's evidence: the curator's quote, else the queued one, else
    /// the record's text.
    pub(super) quote: String,
    /// The proposed relation (index into [`TOM_KINDS`]).
    pub(super) relation: usize,
    /// The proposed target node (`None`: an unknown person).
    pub(super) target: Option<String>,
    /// The proposed target's mention in the record.
    pub(super) mention: Option<String>,
    pub(super) verdict: Verdict,
    /// The curated table's rows of tags of the same record (their tom_kind
    /// examples are grouped by row).
    pub(super) tag_rows: Vec<usize>,
}

/// The edge decisions of the curated table, and those no part of the
/// edge model can read, by why.
#[derive(Debug, Default)]
pub(super) struct EdgeDecisions {
    pub(super) edges: Vec<EdgeDecision>,
    pub(super) not_used: BTreeMap<&'static str, usize>,
}

/// Reads the edge decisions of the curated table's rows.
pub(super) fn edge_decisions(rows: &[CuratedRow]) -> EdgeDecisions {
    let mut out = EdgeDecisions::default();
    for r in rows.iter().filter(|r| r.item_type == "edge") {
        let mut skip = |why| *out.not_used.entry(why).or_default() += 1;
        if r.original_target_node
            .as_deref()
            .is_some_and(|t| t.starts_with("memory:"))
        {
            skip("memory_link");
            continue;
        }
        let Some(relation) = r
            .original_label
            .as_deref()
            .and_then(|l| TOM_KINDS.iter().position(|k| *k == l))
        else {
            skip("relation_outside_vocabulary");
            continue;
        };
        let verdict = match r.decision.as_str() {
            "accept" => Verdict::Decided {
                relation_right: true,
                target_right: true,
            },
            "relabel" => Verdict::Decided {
                relation_right: r.label.is_none() || r.label == r.original_label,
                target_right: r.target_node == r.original_target_node,
            },
            "reject" => Verdict::Rejected,
            _ => {
                skip("unknown_decision");
                continue;
            }
        };
        let quote = r
            .decided_quote
            .as_ref()
            .or(r.source_quote.as_ref())
            .filter(|q| !q.trim().is_empty())
            .unwrap_or(&r.record_text);
        out.edges.push(EdgeDecision {
            run_id: r.run_id.clone(),
            record_text: r.record_text.clone(),
            quote: quote.clone(),
            relation,
            target: r.original_target_node.clone(),
            mention: r.target_mention.clone().filter(|m| !m.is_empty()),
            verdict,
            tag_rows: rows
                .iter()
                .enumerate()
                .filter(|(_, t)| t.item_type == "tag" && t.record_id == r.record_id)
                .map(|(g, _)| g)
                .collect(),
        });
    }
    out
}

/// One edge decision with what the models say of it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Prepared {
    pub(super) verdict: Verdict,
    /// Out-of-bag P(proposed relation) on the quote (`None`: every member
    /// drew the record).
    pub(super) p_kind: Option<f64>,
    /// The proposed target is not a node of the run's registry.
    pub(super) unknown: bool,
    /// A registry edge whose mention is a registry match of its node: the
    /// match's case class (`true`: as the registry writes it).
    pub(super) exact_case: Option<bool>,
    /// An unknown-person edge given a target: its person example's row.
    pub(super) person: Option<usize>,
}

/// The edge decisions, prepared for the edge training.
#[derive(Debug, Default)]
pub struct CuratedEdges {
    pub(super) edges: Vec<Prepared>,
    /// The person examples' rows: the mention's pooled span vector and its
    /// candidate features (all people).
    pub(super) person_rows: Vec<Vec<f32>>,
    /// Edge decisions read, and those not used, by why.
    pub(super) decisions: usize,
    pub(super) not_used: BTreeMap<&'static str, usize>,
}

/// What [`prepare`] needs from the rest of the training.
pub(super) struct PrepareInputs<'a> {
    pub(super) encoder: &'a Encoder,
    /// The tom_kind head (its temperature) and its bag's members.
    pub(super) tom: &'a Head,
    pub(super) members: &'a [(Head, Vec<bool>)],
    /// The bag group of the curated table's row 0 (curated tom_kind
    /// examples are grouped `row + offset`).
    pub(super) group_offset: usize,
    /// The staging directory of the decisions (its runs' registries).
    pub(super) staging: Option<&'a Path>,
    /// The training registry, for a run whose registry cannot be read.
    pub(super) registry: Option<&'a Registry>,
    pub(super) cache: Option<&'a Path>,
}

/// Scores the decisions' quotes, finds their registry matches and their
/// person examples.
pub(super) fn prepare(
    decisions: &EdgeDecisions,
    inputs: &PrepareInputs<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<CuratedEdges, LearnError> {
    let mut out = CuratedEdges {
        decisions: decisions.edges.len() + decisions.not_used.values().sum::<usize>(),
        not_used: decisions.not_used.clone(),
        ..CuratedEdges::default()
    };
    if decisions.edges.is_empty() {
        return Ok(out);
    }
    let quotes: Vec<&str> = decisions.edges.iter().map(|e| e.quote.as_str()).collect();
    let x = crate::embedding::embed(
        inputs.encoder,
        &quotes,
        "curated edge quotes",
        inputs.cache,
        progress,
    )?;
    let p_kinds = out_of_bag_p_kinds(decisions, inputs, &x)?;
    let mut linkers: BTreeMap<&str, Option<(Registry, Linker)>> = BTreeMap::new();
    let mut person_spans: Vec<PersonSpan> = Vec::new();
    for (i, (e, p_kind)) in decisions.edges.iter().zip(p_kinds).enumerate() {
        let linker = linkers.entry(e.run_id.as_str()).or_insert_with(|| {
            let registry = inputs
                .staging
                .and_then(|s| tomlite_core::curate::run_registry(s, &e.run_id))
                .or_else(|| inputs.registry.cloned())?;
            let linker = Linker::new(&registry);
            Some((registry, linker))
        });
        let unknown = match (&e.target, linker.as_ref()) {
            (None, _) => true,
            (Some(t), Some((registry, _))) => !registry.contains(t),
            (Some(_), None) => false,
        };
        let exact_case = match (&e.target, linker.as_ref()) {
            (Some(t), Some((_, l))) if !unknown => {
                registry_match(l, &e.record_text, t, e.mention.as_deref())
            }
            _ => None,
        };
        let person = match (unknown, e.verdict, e.mention.as_deref()) {
            (true, Verdict::Decided { .. }, Some(m)) => {
                person_candidate(&e.record_text, m).map(|(span, features)| {
                    person_spans.push((i, span, features));
                    person_spans.len() - 1
                })
            }
            _ => None,
        };
        out.edges.push(Prepared {
            verdict: e.verdict,
            p_kind,
            unknown,
            exact_case,
            person,
        });
    }
    out.person_rows = person_rows(inputs.encoder, decisions, &person_spans)?;
    Ok(out)
}

/// Per decision, the mean logit of its proposed relation over the members
/// that drew none of its record's curated tags, through the head's
/// temperature.
fn out_of_bag_p_kinds(
    decisions: &EdgeDecisions,
    inputs: &PrepareInputs<'_>,
    x: &Rows,
) -> Result<Vec<Option<f64>>, LearnError> {
    let mut sums = vec![(0f64, 0usize); decisions.edges.len()];
    for (head, drawn) in inputs.members {
        let logits = head.logits_rows(x)?;
        for ((e, z), sum) in decisions.edges.iter().zip(&logits).zip(&mut sums) {
            let saw = e
                .tag_rows
                .iter()
                .any(|g| drawn.get(g + inputs.group_offset).copied().unwrap_or(false));
            if !saw {
                sum.0 += f64::from(z[e.relation]);
                sum.1 += 1;
            }
        }
    }
    Ok(sums
        .iter()
        .map(|&(s, n)| (n > 0).then(|| sigmoid_t((s / n as f64) as f32, inputs.tom.temperature)))
        .collect())
}

/// The case class of the registry match of `node` at `mention` (any of its
/// matches without a mention), if the text has one.
fn registry_match(linker: &Linker, text: &str, node: &str, mention: Option<&str>) -> Option<bool> {
    linker
        .link(text)
        .into_iter()
        .find(|m| {
            linker.nodes()[m.node].id == node
                && mention.is_none_or(|mention| &text[m.start..m.end] == mention)
        })
        .map(|m| m.exact_case)
}

/// A person example: its decision, its span in the record and its
/// candidate features.
type PersonSpan = (usize, (usize, usize), [f32; CANDIDATE_FEATURES]);

/// The person-like candidate of `text` that overlaps the first whole-word
/// occurrence of `mention`: its span and features.
fn person_candidate(
    text: &str,
    mention: &str,
) -> Option<((usize, usize), [f32; CANDIDATE_FEATURES])> {
    let (start, end) = text
        .match_indices(mention)
        .map(|(s, m)| (s, s + m.len()))
        .find(|&(s, e)| {
            text[..s]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric())
                && text[e..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric())
        })?;
    candidates(text, &sentences(text), &[])
        .into_iter()
        .find(|c| c.start < end && start < c.end)
        .map(|c| ((c.start, c.end), c.features()))
}

/// The person examples' rows: each span pooled in its record, then its
/// features (zeros where the encoder could not pool the span).
fn person_rows(
    encoder: &Encoder,
    decisions: &EdgeDecisions,
    spans: &[PersonSpan],
) -> Result<Vec<Vec<f32>>, LearnError> {
    if spans.is_empty() {
        return Ok(Vec::new());
    }
    let texts: Vec<&str> = spans
        .iter()
        .map(|&(i, _, _)| decisions.edges[i].record_text.as_str())
        .collect();
    let pooled: Vec<Vec<(usize, usize)>> = spans.iter().map(|&(_, s, _)| vec![s]).collect();
    let encoded = encoder.encode_with_spans(&texts, &pooled)?;
    Ok(spans
        .iter()
        .zip(&encoded.spans)
        .map(|((_, _, features), v)| {
            let mut row = v
                .first()
                .cloned()
                .flatten()
                .unwrap_or_else(|| vec![0f32; encoder.dim()]);
            row.extend_from_slice(features);
            row
        })
        .collect())
}

/// How many decisions each part of the edge model learned from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CuratedEdgeUse {
    /// Edge decisions read.
    pub decisions: usize,
    /// Rows added to the relation calibration.
    pub relation: usize,
    /// Their mean p_kind (where on the calibration they weigh most).
    pub relation_mean_p_kind: Option<f64>,
    /// Counts added to the registry-link priors.
    pub registry_link: usize,
    /// Examples added to the person head.
    pub person: usize,
    /// Decisions that taught at least one part.
    pub used: usize,
    /// Decisions that taught none, by why.
    pub not_used: BTreeMap<&'static str, usize>,
}

/// The registry-link counts (right, all; other case then exact case) and
/// relation rows the decisions add, and what each part used.
#[derive(Debug, Default)]
pub(super) struct Learned {
    pub(super) class: [(usize, usize); 2],
    pub(super) relation_rows: Vec<([f64; 2], bool)>,
    pub(super) used: CuratedEdgeUse,
}

impl CuratedEdges {
    /// The registry-link counts and relation rows of the decisions;
    /// `link_rate` (other case, exact case) and `relation` are the model
    /// fitted on the training data alone, read for rejections.
    pub(super) fn links(&self, link_rate: [f64; 2], relation: &dyn Fn(f64) -> f64) -> Learned {
        let mut l = Learned {
            used: CuratedEdgeUse {
                decisions: self.decisions,
                not_used: self.not_used.clone(),
                ..CuratedEdgeUse::default()
            },
            ..Learned::default()
        };
        let mut sum_p = 0.0;
        for e in &self.edges {
            let (mut relation_row, mut link) = (None, None);
            match (e.verdict, e.p_kind, e.exact_case) {
                (
                    Verdict::Decided {
                        relation_right,
                        target_right,
                    },
                    p,
                    exact,
                ) => {
                    relation_row = p.map(|p| (p, relation_right));
                    link = exact.map(|x| (x, target_right));
                }
                (Verdict::Rejected, _, _) if e.unknown => {}
                (Verdict::Rejected, Some(p), Some(exact)) => {
                    let (p_link, r) = (link_rate[usize::from(exact)], relation(p));
                    let target_right = p_link * (1.0 - r) / (1.0 - p_link * r).max(1e-9);
                    if target_right >= 0.5 {
                        relation_row = Some((p, false));
                    } else {
                        link = Some((exact, false));
                    }
                }
                (Verdict::Rejected, _, _) => {}
            }
            if let Some((p, right)) = relation_row {
                l.relation_rows.push(([logit(p), 0.0], right));
                l.used.relation += 1;
            }
            if let Some((exact, right)) = link {
                let c = &mut l.class[usize::from(exact)];
                c.0 += usize::from(right);
                c.1 += 1;
                l.used.registry_link += 1;
            }
            l.used.person += usize::from(e.person.is_some());
            if let Some((p, _)) = relation_row {
                sum_p += p;
            }
            if relation_row.is_some() || link.is_some() || e.person.is_some() {
                l.used.used += 1;
            } else {
                *l.used.not_used.entry(why_not_used(e)).or_default() += 1;
            }
        }
        l.used.relation_mean_p_kind = (l.used.relation > 0).then(|| sum_p / l.used.relation as f64);
        l
    }
}

/// Why a prepared decision taught no part.
fn why_not_used(e: &Prepared) -> &'static str {
    match (e.verdict, e.unknown) {
        (Verdict::Rejected, true) => "rejected_unknown_person",
        _ if e.p_kind.is_none() => "no_out_of_bag_score",
        _ => "no_registry_match",
    }
}

/// The progress line of the edge decisions.
pub(super) fn report(used: &CuratedEdgeUse, progress: &mut dyn FnMut(&str)) {
    if used.decisions == 0 {
        return;
    }
    progress(&format!(
        "curated: {} edge decisions teach the edge model: {} relation rows, {} registry-link counts, {} person examples ({} used, not used: {:?})",
        used.decisions, used.relation, used.registry_link, used.person, used.used, used.not_used
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(item_id: &str, decision: &str, relation: &str, target: Option<&str>) -> CuratedRow {
        let text = "Priya called. Lena wants the summary short.";
        CuratedRow {
            run_id: "night-1".into(),
            item_id: item_id.into(),
            item_type: "edge".into(),
            record_id: item_id.split('#').next().unwrap_or_default().into(),
            persona_id: "ada".into(),
            record_kind: None,
            decision: decision.into(),
            label: Some(relation.into()),
            original_label: Some(relation.into()),
            target_node: target.map(str::to_string),
            original_target_node: target.map(str::to_string),
            target_mention: Some("Lena".into()),
            edge_key: None,
            affect: None,
            intensity: None,
            source_quote: Some("Lena wants the summary short.".into()),
            quote_start: Some(14),
            quote_end: Some(43),
            record_text: text.into(),
            record_fingerprint: None,
            curator: "rosa".into(),
            note: None,
            decided_at: "2026-11-30T08:00:00Z".into(),
            applied_at: "2026-11-30T08:01:00Z".into(),
            decided_affect: None,
            decided_intensity: None,
            confidence: Some(0.7),
            affect_confidence: None,
            intensity_confidence: None,
            decided_quote_start: None,
            decided_quote_end: None,
            decided_quote: None,
            bulk: false,
        }
    }

    #[test]
    fn each_decision_says_which_parts_of_the_proposed_edge_were_right() {
        let mut relabelled_relation = row("r2#edge0", "relabel", "belief", Some("user:lena"));
        relabelled_relation.label = Some("preference".into());
        let mut retargeted = row("r3#edge0", "relabel", "belief", Some("user:lena"));
        retargeted.target_node = Some("user:sam".into());
        retargeted.decided_quote = Some("Priya called.".into());
        let mut tag = row("r1#tag0", "accept", "belief", None);
        tag.item_type = "tag".into();
        let rows = vec![
            tag,
            row("r1#edge0", "accept", "belief", Some("user:lena")),
            relabelled_relation,
            retargeted,
            row("r4#edge0", "reject", "belief", Some("user:lena")),
            row("r5#edge0", "accept", "goal", Some("memory:j-002")),
            row("r6#edge0", "relabel", "flatmate_of", Some("user:lena")),
        ];
        let d = edge_decisions(&rows);
        let verdicts: Vec<Verdict> = d.edges.iter().map(|e| e.verdict).collect();
        let decided = |relation_right, target_right| Verdict::Decided {
            relation_right,
            target_right,
        };
        assert_eq!(
            verdicts,
            [
                decided(true, true),
                decided(false, true),
                decided(true, false),
                Verdict::Rejected
            ]
        );
        // The relation as proposed, and the curator's quote over the queued one.
        assert_eq!(d.edges[1].relation, 1);
        assert_eq!(d.edges[0].quote, "Lena wants the summary short.");
        assert_eq!(d.edges[2].quote, "Priya called.");
        // The record's curated tags (their bag groups).
        assert_eq!(d.edges[0].tag_rows, [0]);
        assert!(d.edges[1].tag_rows.is_empty());
        assert_eq!(d.not_used["memory_link"], 1);
        assert_eq!(d.not_used["relation_outside_vocabulary"], 1);
    }

    fn prepared(verdict: Verdict, exact_case: Option<bool>, unknown: bool) -> Prepared {
        Prepared {
            verdict,
            p_kind: Some(0.6),
            unknown,
            exact_case,
            person: None,
        }
    }

    const ACCEPTED: Verdict = Verdict::Decided {
        relation_right: true,
        target_right: true,
    };

    #[test]
    fn accepted_and_relabelled_edges_add_their_rows_and_counts() {
        let mut person = prepared(
            Verdict::Decided {
                relation_right: true,
                target_right: false,
            },
            None,
            true,
        );
        person.person = Some(0);
        let curated = CuratedEdges {
            edges: vec![
                prepared(ACCEPTED, Some(true), false),
                prepared(
                    Verdict::Decided {
                        relation_right: false,
                        target_right: false,
                    },
                    Some(false),
                    false,
                ),
                // The annotator's edge whose mention is no registry match.
                prepared(ACCEPTED, None, false),
                person,
            ],
            person_rows: vec![vec![0.0; 3]],
            decisions: 5,
            not_used: BTreeMap::from([("memory_link", 1)]),
        };
        let l = curated.links([0.5, 0.5], &|p| p);
        assert_eq!(l.class, [(0, 1), (1, 1)]);
        let rows: Vec<bool> = l.relation_rows.iter().map(|r| r.1).collect();
        assert_eq!(rows, [true, false, true, true]);
        assert!((l.relation_rows[0].0[0] - logit(0.6)).abs() < 1e-12);
        assert_eq!(
            (
                l.used.relation,
                l.used.registry_link,
                l.used.person,
                l.used.used
            ),
            (4, 2, 1, 4)
        );
        assert_eq!(l.used.not_used, BTreeMap::from([("memory_link", 1)]));
        assert!((l.used.relation_mean_p_kind.unwrap() - 0.6).abs() < 1e-12);
    }

    // A rejection is read the way the training data's model finds more
    // likely; an unknown person's is not read.
    #[test]
    fn a_rejected_edge_blames_the_part_the_model_doubts_more() {
        let curated = CuratedEdges {
            edges: vec![
                prepared(Verdict::Rejected, Some(true), false),
                prepared(Verdict::Rejected, Some(false), false),
                prepared(Verdict::Rejected, None, true),
            ],
            decisions: 3,
            ..CuratedEdges::default()
        };
        // Exact-case links are nearly always right, other-case ones seldom:
        // P(link right | edge wrong) = 0.95·0.4/0.43 ≈ 0.88 and 0.1·0.4/0.94 ≈ 0.04.
        let l = curated.links([0.1, 0.95], &|_| 0.6);
        assert_eq!(l.relation_rows.len(), 1);
        assert!(!l.relation_rows[0].1);
        assert_eq!(l.class, [(0, 1), (0, 0)]);
        assert_eq!(l.used.used, 2);
        assert_eq!(l.used.not_used["rejected_unknown_person"], 1);
        // Nothing a rejection adds is a right relation or a right link.
        assert!(l.relation_rows.iter().all(|r| !r.1));
        assert!(l.class.iter().all(|c| c.0 == 0));
    }

    #[test]
    fn an_unknown_persons_example_is_the_candidate_at_its_mention() {
        let text = "Lunch with Priya ran long. Priyanka was late.";
        let ((start, end), _) = person_candidate(text, "Priya").unwrap();
        assert_eq!(&text[start..end], "Priya");
        // A whole word only, and a mention the text does not hold has none.
        assert!(person_candidate(text, "Pri").is_none());
        assert!(person_candidate(text, "Jonas").is_none());
    }

    #[test]
    fn a_registry_edge_takes_the_case_class_of_its_match() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes.jsonl");
        std::fs::write(
            &path,
            r#"{"id":"user:lena","kind":"user","name":"Lena Fischer","aliases":["Lena"]}"#,
        )
        .unwrap();
        let linker = Linker::new(&Registry::load(&path).unwrap());
        let text = "Lena called; later LENA wrote.";
        assert_eq!(
            registry_match(&linker, text, "user:lena", Some("Lena")),
            Some(true)
        );
        assert_eq!(
            registry_match(&linker, text, "user:lena", Some("LENA")),
            Some(false)
        );
        assert_eq!(registry_match(&linker, text, "user:lena", Some("me")), None);
        assert_eq!(registry_match(&linker, text, "user:sam", None), None);
    }
}
