//! Training of what the classifier needs to propose edges: the person head
//! (is a candidate name a person or agent?), the link priors of registry
//! matches, and the calibrations of edge and memory-link confidences
//! ([`EdgeCalibration`]). Everything is fitted on the training split only,
//! on out-of-bag scores where a head is involved, like the tom_kind head.

use std::path::Path;

use serde_json::json;
use tomlite_models::data::LabeledRecord;
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::metrics::{
    EdgeCalibration, TagCalibration, fit_logistic_ridge, fit_temperature_sigmoid, logit, sigmoid_t,
};
use tomlite_models::{Encoder, Rows};

use crate::bagging::train_bagged;
use crate::curated_edges::{CuratedEdgeUse, CuratedEdges, report};
use crate::error::LearnError;
use crate::link_threshold::ranked_min_cosine;
use tomlite_core::graph::mentions::{CANDIDATE_FEATURES, Candidate, Linker, candidates, fold};
use tomlite_core::graph::nodes::Registry;
use tomlite_core::segment::sentences;
use tomlite_core::vocab::TOM_KINDS;

/// The person threshold is the lowest (from 0.5 up) whose out-of-bag
/// precision on the training candidates reaches this: unknown-node edges
/// go to a person, so false ones cost the curator's time.
pub const PERSON_PRECISION: f64 = 0.85;

/// Ridge of the edge regressions: a registry case class can be all wrong
/// (separable), and the fit must stay finite.
const EDGE_RIDGE: f64 = 0.01;

/// What the edge training needs from the rest of `tomlite train`.
pub struct EdgeTraining<'a> {
    /// The encoder.
    pub encoder: &'a Encoder,
    /// Training records, in the order of the tom_kind bag's groups.
    pub records: &'a [LabeledRecord],
    /// Every labeled record with its embedding row (memory links' pool).
    pub pool: &'a [LabeledRecord],
    /// Embeddings of `pool`, `[n, dim]`.
    pub pool_x: &'a Rows,
    /// The training registry.
    pub registry: Option<&'a Registry>,
    /// The tom_kind head (its temperature set).
    pub tom: &'a Head,
    /// The tom_kind bag's members and which records each drew.
    pub members: &'a [(Head, Vec<bool>)],
    /// Per training record: out-of-bag tom_kind logits of its text.
    pub record_oob: &'a [Option<Vec<f32>>],
    /// The tag calibration.
    pub tag_calibration: &'a TagCalibration,
    /// Embedding cache directory.
    pub cache: Option<&'a Path>,
    /// The curator's edge decisions.
    pub curated: &'a CuratedEdges,
}

/// The trained person head, the calibration, and figures for the card.
pub struct EdgeModel {
    /// The person head.
    pub person: Head,
    /// The calibration.
    pub calibration: EdgeCalibration,
    /// Training figures.
    pub metrics: serde_json::Value,
    /// What the curator's edge decisions taught.
    pub curated: CuratedEdgeUse,
}

/// One record's text encoded with its sentences and candidates pooled.
struct Pooled {
    sentences: Vec<(usize, usize)>,
    /// Sentence vectors (empty for a one-sentence text).
    sentence_vectors: Vec<Vec<f32>>,
    candidates: Vec<Candidate>,
    candidate_vectors: Vec<Vec<f32>>,
}

/// One record's sentences and candidates, and the spans pooled for them:
/// the sentences (none for a one-sentence text), then the candidates.
struct RecordSpans {
    sentences: Vec<(usize, usize)>,
    candidates: Vec<Candidate>,
    pooled: Vec<(usize, usize)>,
}

fn record_spans(records: &[LabeledRecord]) -> Vec<RecordSpans> {
    records
        .iter()
        .map(|r| {
            let sentences = sentences(&r.text);
            let candidates = candidates(&r.text, &sentences, &[]);
            let mut pooled: Vec<(usize, usize)> = if sentences.len() > 1 {
                sentences.clone()
            } else {
                Vec::new()
            };
            pooled.extend(candidates.iter().map(|c| (c.start, c.end)));
            RecordSpans {
                sentences,
                candidates,
                pooled,
            }
        })
        .collect()
}

/// The cache key of the records' span vectors: sha256 of the encoder (and
/// its adapters), the texts and the spans.
fn pooled_key(encoder: &Encoder, records: &[LabeledRecord], spans: &[RecordSpans]) -> String {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    h.update(b"pooled-v1");
    h.update(encoder.sha256().as_bytes());
    // A fine-tuned encoder embeds differently: its own cache entries.
    if let Some(a) = encoder.adapters_sha256() {
        h.update(b"lora");
        h.update(a.as_bytes());
    }
    for (r, s) in records.iter().zip(spans) {
        h.update((r.text.len() as u64).to_le_bytes());
        h.update(r.text.as_bytes());
        for &(start, end) in &s.pooled {
            h.update((start as u64).to_le_bytes());
            h.update((end as u64).to_le_bytes());
        }
    }
    hex::encode(h.finalize())
}

fn encode_pooled(
    encoder: &Encoder,
    records: &[LabeledRecord],
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Pooled>, LearnError> {
    let dim = encoder.dim();
    let spans = record_spans(records);
    let total: usize = spans.iter().map(|s| s.pooled.len()).sum();
    let file = cache.map(|c| {
        c.join(format!(
            "{}.safetensors",
            pooled_key(encoder, records, &spans)
        ))
    });
    let cached = file
        .as_deref()
        .and_then(|f| Rows::read_safetensors(f, "spans").ok())
        .filter(|rows| (rows.len(), rows.dim()) == (total, dim));
    let vectors = match cached {
        Some(rows) => {
            progress(&format!(
                "embedding training mentions: {total} spans read from the cache"
            ));
            rows
        }
        None => {
            let rows = encode_spans(encoder, records, &spans, progress)?;
            if let (Some(f), Some(c)) = (&file, cache)
                && std::fs::create_dir_all(c).is_ok()
            {
                // The cache is an optimisation: failing to write it is not an error.
                let _ = rows.write_safetensors(f, "spans");
            }
            rows
        }
    };
    let mut out = Vec::with_capacity(records.len());
    let mut next_row = 0usize;
    for s in spans {
        let n_sentences = s.pooled.len() - s.candidates.len();
        let row = |i: usize| vectors.row(next_row + i).to_vec();
        out.push(Pooled {
            sentence_vectors: (0..n_sentences).map(row).collect(),
            candidate_vectors: (n_sentences..s.pooled.len()).map(row).collect(),
            sentences: s.sentences,
            candidates: s.candidates,
        });
        next_row += s.pooled.len();
    }
    Ok(out)
}

/// Every record's pooled span vectors, record after record (zeros for a
/// span the encoder could not pool).
fn encode_spans(
    encoder: &Encoder,
    records: &[LabeledRecord],
    spans: &[RecordSpans],
    progress: &mut dyn FnMut(&str),
) -> Result<Rows, LearnError> {
    let dim = encoder.dim();
    let started = std::time::Instant::now();
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let pooled: Vec<Vec<(usize, usize)>> = spans.iter().map(|s| s.pooled.clone()).collect();
    let encoded = encoder.encode_with_spans(&texts, &pooled)?;
    let total: usize = pooled.iter().map(Vec::len).sum();
    let mut flat = Vec::with_capacity(total * dim);
    for v in encoded.spans.iter().flatten() {
        match v {
            Some(v) => flat.extend_from_slice(v),
            None => flat.extend(std::iter::repeat_n(0f32, dim)),
        }
    }
    progress(&format!(
        "embedding training mentions: {} texts, {total} spans in {:.0}s",
        texts.len(),
        started.elapsed().as_secs_f64()
    ));
    Ok(Rows::new(flat, dim)?)
}

/// Byte ranges of every occurrence of `name` in `text` as a whole word.
fn occurrences(text: &str, name: &str) -> Vec<(usize, usize)> {
    if name.is_empty() {
        return Vec::new();
    }
    text.match_indices(name)
        .map(|(s, m)| (s, s + m.len()))
        .filter(|&(s, e)| {
            let before = text[..s].chars().next_back();
            let after = text[e..].chars().next();
            before.is_none_or(|c| !c.is_alphanumeric())
                && after.is_none_or(|c| !c.is_alphanumeric())
        })
        .collect()
}

/// Spans of a record's people: gold `people` and its persona's own name.
pub fn person_spans(r: &LabeledRecord) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = r
        .gold
        .people
        .iter()
        .flat_map(|p| occurrences(&r.text, p))
        .collect();
    let mut persona = r.persona_id.clone();
    if let Some(f) = persona.get_mut(0..1) {
        f.make_ascii_uppercase();
    }
    out.extend(occurrences(&r.text, &persona));
    out
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Trains the person head and fits the edge calibration.
pub fn train_edges(
    t: &EdgeTraining<'_>,
    opts: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<EdgeModel, LearnError> {
    let pooled = encode_pooled(t.encoder, t.records, t.cache, progress)?;
    let person = train_person_head(t, &pooled, opts, progress)?;
    let sentence_kinds = sentence_kinds(t, &pooled)?;
    let registry = registry_links(t, &pooled, &sentence_kinds, progress);
    let memory = memory_links(t, progress);
    report(&registry.curated, progress);
    let calibration = EdgeCalibration {
        link_exact_case: registry.link_exact_case,
        link_other_case: registry.link_other_case,
        mention: registry.mention,
        n_mentions: registry.n_mentions,
        person_min: person.person_min,
        memory_cosine: memory.cosine,
        memory_min_cosine: memory.min_cosine,
        memory: memory.combined,
        n_memory: memory.queries,
    };
    let metrics = json!({
        "person": {"candidates": person.candidates, "people": person.people,
                   "person_min": person.person_min, "oob_precision": person.oob_precision,
                   "oob_recall": person.oob_recall},
        "registry_links": {"matches_exact_case": registry.matches_exact_case,
                           "matches_other_case": registry.matches_other_case},
        "memory_links": {"queries": memory.queries, "nearest_is_gold": memory.nearest_is_gold,
                         "proposed": memory.proposed, "proposed_right": memory.proposed_right},
        "curated": registry.curated,
    });
    Ok(EdgeModel {
        person: person.head,
        calibration,
        metrics,
        curated: registry.curated,
    })
}

/// The person head and its out-of-bag figures.
struct PersonHead {
    head: Head,
    /// The lowest P(person) whose out-of-bag precision reaches
    /// [`PERSON_PRECISION`].
    person_min: f64,
    /// Candidates it was trained on.
    candidates: usize,
    /// Candidates that are gold people.
    people: usize,
    oob_precision: f64,
    oob_recall: f64,
}

/// The person head: candidate spans read in context, plus their shape,
/// bagged; its temperature and threshold fitted out of bag.
fn train_person_head(
    t: &EdgeTraining<'_>,
    pooled: &[Pooled],
    opts: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<PersonHead, LearnError> {
    let mut rows: Vec<f32> = Vec::new();
    let mut gold: Vec<Vec<f32>> = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    for (g, (r, p)) in t.records.iter().zip(pooled).enumerate() {
        let people = person_spans(r);
        for (c, v) in p.candidates.iter().zip(&p.candidate_vectors) {
            rows.extend_from_slice(v);
            rows.extend_from_slice(&c.features());
            let is = people.iter().any(|&(s, e)| c.start < e && s < c.end);
            gold.push(vec![if is { 1.0 } else { 0.0 }]);
            group.push(g);
        }
    }
    // The curator's people join the training rows, never the out-of-bag
    // rows the temperature and `person_min` are fitted on.
    let training = gold.len();
    for (i, row) in t.curated.person_rows.iter().enumerate() {
        rows.extend_from_slice(row);
        gold.push(vec![1.0]);
        group.push(t.records.len() + i);
    }
    let x = Rows::new(rows, t.encoder.dim() + CANDIDATE_FEATURES)?;
    let spec = HeadSpec {
        wording_cues: false,
        name: "person".into(),
        labels: vec!["person".into()],
        multi_label: true,
        hidden: 0,
    };
    let targets = Targets::Multi(gold.clone());
    let bag = train_bagged(&spec, &x, &targets, &group, opts, |_, _, _| {})?;
    let mut head = bag.head;
    let (oob_z, oob_y): (Vec<Vec<f32>>, Vec<Vec<bool>>) = bag
        .oob
        .iter()
        .zip(&gold[..training])
        .filter_map(|(z, y)| z.clone().map(|z| (z, vec![y[0] > 0.5])))
        .unzip();
    head.temperature = fit_temperature_sigmoid(&oob_z, &oob_y);
    let oob_p: Vec<(f64, bool)> = oob_z
        .iter()
        .zip(&oob_y)
        .map(|(z, y)| (sigmoid_t(z[0], head.temperature), y[0]))
        .collect();
    let person_min = (0..10)
        .map(|i| 0.5 + 0.05 * f64::from(i))
        .find(|&th| precision_recall_at(&oob_p, th).0 >= PERSON_PRECISION)
        .unwrap_or(0.95);
    let (oob_precision, oob_recall) = precision_recall_at(&oob_p, person_min);
    let people = gold[..training].iter().filter(|y| y[0] > 0.5).count();
    progress(&format!(
        "person head: {training} candidates ({people} people), temperature {:.3}; out-of-bag at P >= {person_min:.2}: precision {oob_precision:.3}, recall {oob_recall:.3}",
        head.temperature
    ));
    Ok(PersonHead {
        head,
        person_min,
        candidates: training,
        people,
        oob_precision,
        oob_recall,
    })
}

/// Precision and recall of `P >= threshold` on (P, gold) pairs.
fn precision_recall_at(scored: &[(f64, bool)], threshold: f64) -> (f64, f64) {
    let kept: Vec<&(f64, bool)> = scored.iter().filter(|(p, _)| *p >= threshold).collect();
    let true_positives = kept.iter().filter(|(_, y)| *y).count();
    let positives = scored.iter().filter(|(_, y)| *y).count();
    (
        true_positives as f64 / kept.len().max(1) as f64,
        true_positives as f64 / positives.max(1) as f64,
    )
}

/// Per record, out-of-bag sums of the tom_kind logits of its sentence
/// vectors, and how many members left the record out.
struct SentenceLogits {
    sums: Vec<Vec<Vec<f32>>>,
    members_out: Vec<usize>,
}

/// Sums, per record and sentence, the tom_kind logits of the bag's
/// members that did not draw the record.
fn out_of_bag_sentence_logits(
    t: &EdgeTraining<'_>,
    pooled: &[Pooled],
) -> Result<SentenceLogits, LearnError> {
    let kinds = TOM_KINDS.len();
    let mut sums: Vec<Vec<Vec<f32>>> = pooled
        .iter()
        .map(|p| vec![vec![0f32; kinds]; p.sentence_vectors.len()])
        .collect();
    let mut members_out = vec![0usize; pooled.len()];
    let flat: Vec<f32> = pooled
        .iter()
        .flat_map(|p| p.sentence_vectors.iter().flatten().copied())
        .collect();
    if flat.is_empty() {
        return Ok(SentenceLogits { sums, members_out });
    }
    let sentence_x = Rows::new(flat, t.encoder.dim())?;
    for (head, drawn) in t.members {
        let logits = head.logits_rows(&sentence_x)?;
        let mut next_row = 0usize;
        for (g, p) in pooled.iter().enumerate() {
            let count = p.sentence_vectors.len();
            if !drawn.get(g).copied().unwrap_or(true) {
                members_out[g] += 1;
                let record_logits = &logits[next_row..next_row + count];
                for (sum, z) in sums[g].iter_mut().zip(record_logits) {
                    for (a, b) in sum.iter_mut().zip(z) {
                        *a += b;
                    }
                }
            }
            next_row += count;
        }
    }
    Ok(SentenceLogits { sums, members_out })
}

/// Sentence kinds, out of bag: per record and sentence, the best kind and
/// its probability from the mean logits of the members that did not draw
/// the record; a sentence that a tag quotes takes the tag.
fn sentence_kinds(
    t: &EdgeTraining<'_>,
    pooled: &[Pooled],
) -> Result<Vec<Vec<(usize, f64)>>, LearnError> {
    let SentenceLogits { sums, members_out } = out_of_bag_sentence_logits(t, pooled)?;
    let best = |z: &[f32]| {
        let p: Vec<f64> = z.iter().map(|&v| sigmoid_t(v, t.tom.temperature)).collect();
        let k = (0..p.len())
            .max_by(|&a, &b| p[a].total_cmp(&p[b]))
            .unwrap_or(0);
        (k, p[k])
    };
    Ok(pooled
        .iter()
        .enumerate()
        .map(|(g, p)| {
            let record_z = t.record_oob.get(g).cloned().flatten();
            let mut out: Vec<(usize, f64)> = if p.sentence_vectors.is_empty() {
                p.sentences
                    .iter()
                    .map(|_| record_z.as_deref().map_or((0, 0.5), best))
                    .collect()
            } else if members_out[g] == 0 {
                vec![(0, 0.5); p.sentence_vectors.len()]
            } else {
                sums[g]
                    .iter()
                    .map(|s| {
                        let z: Vec<f32> = s.iter().map(|v| v / members_out[g] as f32).collect();
                        best(&z)
                    })
                    .collect()
            };
            // A sentence a tag quotes has the tag's kind and confidence,
            // as the classifier gives it (same rules, out-of-bag scores).
            if let Some(z) = &record_z {
                for (kind, conf) in oob_tags(z, t.tom.temperature, t.tag_calibration) {
                    let quoted = if p.sentence_vectors.is_empty() || members_out[g] == 0 {
                        0
                    } else {
                        (0..sums[g].len())
                            .max_by(|&a, &b| sums[g][a][kind].total_cmp(&sums[g][b][kind]))
                            .unwrap_or(0)
                    };
                    if let Some(slot) = out.get_mut(quoted) {
                        *slot = (kind, conf);
                    }
                }
            }
            out
        })
        .collect())
}

/// The registry-link part of the edge calibration and its figures.
struct RegistryLinks {
    link_exact_case: f64,
    link_other_case: f64,
    mention: [f64; 3],
    n_mentions: usize,
    matches_exact_case: usize,
    matches_other_case: usize,
    curated: CuratedEdgeUse,
}

/// Registry links: how often a match of each case class is a gold
/// mention, then the relation calibration on the sentence kind.
fn registry_links(
    t: &EdgeTraining<'_>,
    pooled: &[Pooled],
    sentence_kinds: &[Vec<(usize, f64)>],
    progress: &mut dyn FnMut(&str),
) -> RegistryLinks {
    let linker = t.registry.map(Linker::new);
    let mut class = [(0usize, 0usize); 2]; // (right, all): other case, exact case
    let mut found: Vec<(bool, f64, bool, bool)> = Vec::new(); // exact, p_kind, relation right, target right
    if let Some(linker) = &linker {
        for ((r, p), kinds) in t.records.iter().zip(pooled).zip(sentence_kinds) {
            let mut seen: Vec<usize> = Vec::new();
            for m in linker.link(&r.text) {
                let id = &linker.nodes()[m.node].id;
                let right = r.gold.mentions.contains(id);
                let c = &mut class[usize::from(m.exact_case)];
                c.0 += usize::from(right);
                c.1 += 1;
                if seen.contains(&m.node) {
                    continue;
                }
                seen.push(m.node);
                let sentence = p
                    .sentences
                    .iter()
                    .position(|&(a, b)| a <= m.start && m.start < b)
                    .unwrap_or(0);
                let (kind, p_kind) = kinds.get(sentence).copied().unwrap_or((0, 0.5));
                let kind_right = r.gold.tom_kinds.iter().any(|g| g == TOM_KINDS[kind]);
                found.push((m.exact_case, p_kind, kind_right, right));
            }
        }
    }
    let rate = |c: (usize, usize)| (c.0 as f64 + 1.0) / (c.1 as f64 + 2.0);
    // P(relation right), on the edges whose target is right.
    let mut mention_rows: Vec<([f64; 2], bool)> = found
        .iter()
        .filter(|f| f.3)
        .map(|&(_, p_kind, y, _)| ([logit(p_kind), 0.0], y))
        .collect();
    // The curator's edges, read with the model of the training data alone.
    let trained = fit_logistic_ridge(&mention_rows, EDGE_RIDGE);
    let relation = |p: f64| sigmoid(trained[0] + trained[1] * logit(p));
    let curated = t.curated.links([rate(class[0]), rate(class[1])], &relation);
    for (c, added) in class.iter_mut().zip(curated.class) {
        (c.0, c.1) = (c.0 + added.0, c.1 + added.1);
    }
    mention_rows.extend(curated.relation_rows);
    let (link_other_case, link_exact_case) = (rate(class[0]), rate(class[1]));
    let mention = fit_logistic_ridge(&mention_rows, EDGE_RIDGE);
    progress(&format!(
        "registry links: {} matches, right {:.3} in the registry's case, {:.3} in another; relation calibration {:?} on {} edges with the right target",
        class[0].1 + class[1].1,
        link_exact_case,
        link_other_case,
        mention.map(|w| (w * 1000.0).round() / 1000.0),
        mention_rows.len()
    ));
    RegistryLinks {
        link_exact_case,
        link_other_case,
        mention,
        n_mentions: mention_rows.len(),
        matches_exact_case: class[1].1,
        matches_other_case: class[0].1,
        curated: curated.used,
    }
}

/// One memory-link query: the cosine of its nearest earlier memory,
/// whether that is a gold link, P(tag right) of its thread kind, and
/// whether the edge (link and kind) is right.
struct LinkQuery {
    cosine: f64,
    link_right: bool,
    p_tag: f64,
    edge_right: bool,
}

/// The memory-link part of the edge calibration and its figures.
struct MemoryLinks {
    cosine: [f64; 2],
    min_cosine: f64,
    combined: [f64; 3],
    queries: usize,
    nearest_is_gold: usize,
    proposed: usize,
    proposed_right: usize,
}

/// Memory links: each training record of a goal or an unresolved thread
/// against the earlier records of its persona.
fn memory_links(t: &EdgeTraining<'_>, progress: &mut dyn FnMut(&str)) -> MemoryLinks {
    let queries = link_queries(t);
    let w = fit_logistic_ridge(
        &queries
            .iter()
            .map(|q| ([q.cosine, 0.0], q.link_right))
            .collect::<Vec<_>>(),
        // Cosines span a few tenths: a ridge on their scale would flatten them.
        1e-4,
    );
    let cosine = [w[0], w[1]];
    let min_cosine = ranked_min_cosine(
        &queries
            .iter()
            .map(|q| (q.cosine, q.link_right))
            .collect::<Vec<_>>(),
    );
    let combined = fit_logistic_ridge(
        &queries
            .iter()
            .map(|q| {
                (
                    [
                        logit(sigmoid(cosine[0] + cosine[1] * q.cosine)),
                        logit(q.p_tag),
                    ],
                    q.edge_right,
                )
            })
            .collect::<Vec<_>>(),
        EDGE_RIDGE,
    );
    let nearest_is_gold = queries.iter().filter(|q| q.link_right).count();
    let above: Vec<&LinkQuery> = queries.iter().filter(|q| q.cosine >= min_cosine).collect();
    let proposed_right = above.iter().filter(|q| q.link_right).count();
    progress(&format!(
        "memory links: {} queries ({nearest_is_gold} with the right memory nearest), cosine threshold {min_cosine:.3}: {} proposed, {proposed_right} right",
        queries.len(),
        above.len(),
    ));
    MemoryLinks {
        cosine,
        min_cosine,
        combined,
        queries: queries.len(),
        nearest_is_gold,
        proposed: above.len(),
        proposed_right,
    }
}

/// Whether a labeled record can be a memory-link query: a record of a set
/// labeled for links (`data/training/tom_lite`, whose thread records carry
/// gold `links_to` and whose other records have none). The style sets
/// (`style` set) were labeled without links: a follow-up there has no
/// gold link, and counting its nearest earlier memory as a wrong link
/// would teach the threshold that real follow-ups are mistakes.
fn is_link_labeled(r: &LabeledRecord) -> bool {
    r.style.is_none()
}

/// The memory-link queries of the training records (see [`LinkQuery`]).
fn link_queries(t: &EdgeTraining<'_>) -> Vec<LinkQuery> {
    let record_index: std::collections::HashMap<&str, usize> = t
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    let threadish: Vec<usize> = ["unresolved_thread", "goal"]
        .iter()
        .filter_map(|k| TOM_KINDS.iter().position(|x| x == k))
        .collect();
    let mut out = Vec::new();
    for (qi, q) in t.pool.iter().enumerate() {
        let Some(&g) = record_index.get(q.id.as_str()) else {
            continue;
        };
        if !is_link_labeled(q) {
            continue;
        }
        if !q
            .gold
            .tom_kinds
            .iter()
            .any(|k| k == "goal" || k == "unresolved_thread")
        {
            continue;
        }
        let Some((pi, cosine)) = nearest_earlier_memory(t, qi) else {
            continue;
        };
        let Some(z) = t.record_oob.get(g).cloned().flatten() else {
            continue;
        };
        let (kind, p_tag) = thread_tag(&z, &threadish, t.tom.temperature, t.tag_calibration);
        let link_right = q.gold.links_to.contains(&t.pool[pi].id);
        let kind_right = q.gold.tom_kinds.iter().any(|x| x == TOM_KINDS[kind]);
        out.push(LinkQuery {
            cosine: f64::from(cosine),
            link_right,
            p_tag,
            edge_right: link_right && kind_right,
        });
    }
    out
}

/// The pool record of `query`'s persona, written before it, nearest to it
/// (cosine of the unit vectors), with that cosine.
fn nearest_earlier_memory(t: &EdgeTraining<'_>, query: usize) -> Option<(usize, f32)> {
    let q = &t.pool[query];
    let mut best: Option<(usize, f32)> = None;
    for (pi, m) in t.pool.iter().enumerate() {
        if pi == query || m.persona_id != q.persona_id || m.created_at >= q.created_at {
            continue;
        }
        let c: f32 = t
            .pool_x
            .row(query)
            .iter()
            .zip(t.pool_x.row(pi))
            .map(|(a, b)| a * b)
            .sum();
        if best.is_none_or(|(_, b)| c > b) {
            best = Some((pi, c));
        }
    }
    best
}

/// The thread kind (of `threadish`) a record's tom_kind logits favour, and
/// P(tag right) of that kind as primary or secondary tag.
fn thread_tag(
    z: &[f32],
    threadish: &[usize],
    temperature: f64,
    cal: &TagCalibration,
) -> (usize, f64) {
    let p: Vec<f64> = z.iter().map(|&v| sigmoid_t(v, temperature)).collect();
    let kind = *threadish
        .iter()
        .max_by(|&&a, &&b| p[a].total_cmp(&p[b]))
        .unwrap_or(&0);
    let top = (0..p.len())
        .max_by(|&a, &b| p[a].total_cmp(&p[b]))
        .unwrap_or(0);
    let runner = (0..p.len())
        .filter(|&i| i != top)
        .max_by(|&a, &b| p[a].total_cmp(&p[b]))
        .unwrap_or(0);
    let p_tag = if kind == top {
        cal.primary(p[kind], p[runner])
    } else {
        cal.secondary(p[kind], p[top])
    };
    (kind, p_tag)
}

/// The tags the classifier would emit from a record's tom_kind logits:
/// primary when its P(tag right) reaches the seed's abstain floor (0.5), a
/// second one when its own reaches [`tomlite_core::annotate::classifier::SECOND_KIND_MIN`].
fn oob_tags(z: &[f32], temperature: f64, cal: &TagCalibration) -> Vec<(usize, f64)> {
    let p: Vec<f64> = z.iter().map(|&v| sigmoid_t(v, temperature)).collect();
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
    let mut out = Vec::new();
    if let [k0, k1, ..] = order[..] {
        let c0 = cal.primary(p[k0], p[k1]);
        if c0 >= 0.5 {
            out.push((k0, c0));
            let c1 = cal.secondary(p[k1], p[k0]);
            if c1 >= f64::from(tomlite_core::annotate::classifier::SECOND_KIND_MIN) {
                out.push((k1, c1));
            }
        }
    }
    out
}

/// Whether an unknown mention found in the text names a gold one: equal
/// after case folding, or one inside the other (`Okafor`, `Dr. Okafor`).
pub fn same_name(found: &str, gold: &str) -> bool {
    let (a, b) = (fold(found), fold(gold));
    a == b || (a.len() >= 3 && b.contains(&a)) || (b.len() >= 3 && a.contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only records of a set labeled for links are memory-link queries.
    #[test]
    fn records_of_the_style_sets_are_not_memory_link_queries() {
        let line = |style: &str| {
            format!(
                r#"{{"id": "r1", "persona_id": "ada", "kind": "journal", "source_path": "j/1.md", "created_at": "2026-01-01T00:00:00Z", "text": "Still waiting on the visa.", "gold": {{"tom_kinds": ["unresolved_thread"], "affect": "anxious", "intensity": "medium", "source_quote": "Still waiting on the visa.", "source_quotes": ["Still waiting on the visa."], "people": []}}{style}}}"#
            )
        };
        let plain: LabeledRecord = serde_json::from_str(&line("")).unwrap();
        let styled: LabeledRecord =
            serde_json::from_str(&line(r#", "style": "travel_log""#)).unwrap();
        assert!(is_link_labeled(&plain));
        assert!(!is_link_labeled(&styled));
    }
}
