//! Training of what the classifier needs to propose edges: the person head
//! (is a candidate name a person or agent?), the link priors of registry
//! matches, and the calibrations of edge and memory-link confidences
//! ([`EdgeCalibration`]). Everything is fitted on the training split only,
//! on out-of-bag scores where a head is involved, like the tom_kind head.

use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::json;
use tomlite_models::Encoder;
use tomlite_models::data::LabeledRecord;
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::metrics::{
    EdgeCalibration, TagCalibration, fit_logistic_ridge, fit_temperature_sigmoid, logit, sigmoid_t,
};

use crate::graph::mentions::{CANDIDATE_FEATURES, Candidate, Linker, candidates, fold};
use crate::graph::nodes::Registry;
use crate::segment::sentences;
use crate::train::error::LearnError;
use crate::vocab::TOM_KINDS;
use tomlite_models::bagging::train_bagged;

/// The person threshold is the lowest (from 0.5 up) whose out-of-bag
/// precision on the training candidates reaches this: unknown-node edges
/// go to a person, so false ones cost the curator's time.
pub const PERSON_PRECISION: f64 = 0.85;

/// A memory link is proposed when its calibrated P(link right) reaches
/// this. Whole-text embeddings separate follow-ups from look-alikes only
/// weakly (out-of-bag, few links are right more than 4 times in 10), so
/// proposals are for the curator: they quarantine below the policy's
/// edge threshold, and this keeps out those that are mostly wrong.
pub const MEMORY_LINK_MIN_P: f64 = 0.3;

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
    pub pool_x: &'a Tensor,
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
}

/// The trained person head, the calibration, and figures for the card.
pub struct EdgeModel {
    /// The person head.
    pub person: Head,
    /// The calibration.
    pub calibration: EdgeCalibration,
    /// Training figures.
    pub metrics: serde_json::Value,
}

/// One record's text encoded with its sentences and candidates pooled.
struct Pooled {
    sentences: Vec<(usize, usize)>,
    /// Sentence vectors (empty for a one-sentence text).
    sentence_vectors: Vec<Vec<f32>>,
    candidates: Vec<Candidate>,
    candidate_vectors: Vec<Vec<f32>>,
}

fn encode_pooled(
    encoder: &Encoder,
    records: &[LabeledRecord],
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Pooled>, LearnError> {
    let dim = encoder.dim();
    let mut spans = Vec::with_capacity(records.len());
    let mut meta = Vec::with_capacity(records.len());
    for r in records {
        let sp = sentences(&r.text);
        let c = candidates(&r.text, &sp, &[]);
        let mut s: Vec<(usize, usize)> = if sp.len() > 1 { sp.clone() } else { Vec::new() };
        s.extend(c.iter().map(|c| (c.start, c.end)));
        spans.push(s);
        meta.push((sp, c));
    }
    let key = {
        use sha2::{Digest as _, Sha256};
        let mut h = Sha256::new();
        h.update(b"pooled-v1");
        h.update(encoder.sha256().as_bytes());
        // A fine-tuned encoder embeds differently: its own cache entries.
        if let Some(a) = encoder.adapters_sha256() {
            h.update(b"lora");
            h.update(a.as_bytes());
        }
        for (r, s) in records.iter().zip(&spans) {
            h.update((r.text.len() as u64).to_le_bytes());
            h.update(r.text.as_bytes());
            for &(a, b) in s {
                h.update((a as u64).to_le_bytes());
                h.update((b as u64).to_le_bytes());
            }
        }
        hex::encode(h.finalize())
    };
    let total: usize = spans.iter().map(Vec::len).sum();
    let file = cache.map(|c| c.join(format!("{key}.safetensors")));
    let mut flat: Option<Vec<f32>> = None;
    if let Some(f) = &file
        && let Ok(mut m) = candle_core::safetensors::load(f, &Device::Cpu)
        && let Some(t) = m.remove("spans")
        && t.dims2().ok() == Some((total, dim))
    {
        progress(&format!(
            "embedding training mentions: {total} spans read from the cache"
        ));
        flat = Some(t.flatten_all()?.to_vec1::<f32>()?);
    }
    let flat = match flat {
        Some(f) => f,
        None => {
            let started = std::time::Instant::now();
            let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
            let e = encoder.encode_with_spans(&texts, &spans)?;
            let mut f = Vec::with_capacity(total * dim);
            for v in e.spans.iter().flatten() {
                match v {
                    Some(v) => f.extend_from_slice(v),
                    None => f.extend(std::iter::repeat_n(0f32, dim)),
                }
            }
            progress(&format!(
                "embedding training mentions: {} texts, {total} spans in {:.0}s",
                texts.len(),
                started.elapsed().as_secs_f64()
            ));
            if let (Some(f_path), Some(c)) = (&file, cache)
                && std::fs::create_dir_all(c).is_ok()
            {
                let mut m = std::collections::HashMap::new();
                m.insert(
                    "spans".to_string(),
                    Tensor::from_vec(f.clone(), (total, dim), &Device::Cpu)?,
                );
                let _ = candle_core::safetensors::save(&m, f_path);
            }
            f
        }
    };
    let mut out = Vec::with_capacity(records.len());
    let mut at = 0usize;
    for ((sp, c), s) in meta.into_iter().zip(&spans) {
        let n_sent = s.len() - c.len();
        let row = |i: usize| flat[(at + i) * dim..(at + i + 1) * dim].to_vec();
        out.push(Pooled {
            sentence_vectors: (0..n_sent).map(row).collect(),
            candidate_vectors: (n_sent..s.len()).map(row).collect(),
            sentences: sp,
            candidates: c,
        });
        at += s.len();
    }
    Ok(out)
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
    let dim = t.encoder.dim();
    let pooled = encode_pooled(t.encoder, t.records, t.cache, progress)?;

    // 1. The person head: candidate spans read in context, plus their shape.
    let mut rows: Vec<f32> = Vec::new();
    let mut gold: Vec<Vec<f32>> = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    for (g, (r, p)) in t.records.iter().zip(&pooled).enumerate() {
        let people = person_spans(r);
        for (c, v) in p.candidates.iter().zip(&p.candidate_vectors) {
            rows.extend_from_slice(v);
            rows.extend_from_slice(&c.features());
            let is = people.iter().any(|&(s, e)| c.start < e && s < c.end);
            gold.push(vec![if is { 1.0 } else { 0.0 }]);
            group.push(g);
        }
    }
    let n = gold.len();
    let x = Tensor::from_vec(rows, (n, dim + CANDIDATE_FEATURES), &Device::Cpu)?;
    let spec = HeadSpec {
        name: "person".into(),
        labels: vec!["person".into()],
        multi_label: true,
        hidden: 0,
    };
    let bag = train_bagged(
        &spec,
        &x,
        &Targets::Multi(gold.clone()),
        &group,
        opts,
        |_, _, _| {},
    )?;
    let mut person = bag.head;
    let (oob_z, oob_y): (Vec<Vec<f32>>, Vec<Vec<bool>>) = bag
        .oob
        .iter()
        .zip(&gold)
        .filter_map(|(z, y)| z.clone().map(|z| (z, vec![y[0] > 0.5])))
        .unzip();
    person.temperature = fit_temperature_sigmoid(&oob_z, &oob_y);
    let oob_p: Vec<(f64, bool)> = oob_z
        .iter()
        .zip(&oob_y)
        .map(|(z, y)| (sigmoid_t(z[0], person.temperature), y[0]))
        .collect();
    let at = |th: f64| {
        let kept: Vec<&(f64, bool)> = oob_p.iter().filter(|(p, _)| *p >= th).collect();
        let tp = kept.iter().filter(|(_, y)| *y).count();
        let pos = oob_p.iter().filter(|(_, y)| *y).count();
        (
            tp as f64 / kept.len().max(1) as f64,
            tp as f64 / pos.max(1) as f64,
            kept.len(),
        )
    };
    let person_min = (0..10)
        .map(|i| 0.5 + 0.05 * f64::from(i))
        .find(|&th| at(th).0 >= PERSON_PRECISION)
        .unwrap_or(0.95);
    let (pp, pr, _) = at(person_min);
    progress(&format!(
        "person head: {n} candidates ({} people), temperature {:.3}; out-of-bag at P >= {person_min:.2}: precision {pp:.3}, recall {pr:.3}",
        gold.iter().filter(|y| y[0] > 0.5).count(),
        person.temperature
    ));

    // 2. Sentence kinds, out of bag: mean logits of the members that did
    // not draw the record; a sentence that a tag quotes takes the tag.
    let kinds = TOM_KINDS.len();
    let sentence_kinds: Vec<Vec<(usize, f64)>> = {
        let mut sums: Vec<Vec<Vec<f32>>> = pooled
            .iter()
            .map(|p| vec![vec![0f32; kinds]; p.sentence_vectors.len()])
            .collect();
        let mut counts = vec![0usize; pooled.len()];
        let flat: Vec<f32> = pooled
            .iter()
            .flat_map(|p| p.sentence_vectors.iter().flatten().copied())
            .collect();
        let m = flat.len() / dim;
        if m > 0 {
            let xs = Tensor::from_vec(flat, (m, dim), &Device::Cpu)?;
            for (head, drawn) in t.members {
                let z = head.logits_rows(&xs)?;
                let mut at = 0usize;
                for (g, p) in pooled.iter().enumerate() {
                    let k = p.sentence_vectors.len();
                    if !drawn.get(g).copied().unwrap_or(true) {
                        counts[g] += 1;
                        for (s, zr) in sums[g].iter_mut().zip(&z[at..at + k]) {
                            for (a, b) in s.iter_mut().zip(zr) {
                                *a += b;
                            }
                        }
                    }
                    at += k;
                }
            }
        }
        let best = |z: &[f32]| {
            let p: Vec<f64> = z.iter().map(|&v| sigmoid_t(v, t.tom.temperature)).collect();
            let k = (0..p.len())
                .max_by(|&a, &b| p[a].total_cmp(&p[b]))
                .unwrap_or(0);
            (k, p[k])
        };
        pooled
            .iter()
            .enumerate()
            .map(|(g, p)| {
                let record_z = t.record_oob.get(g).cloned().flatten();
                let mut out: Vec<(usize, f64)> = if p.sentence_vectors.is_empty() {
                    p.sentences
                        .iter()
                        .map(|_| record_z.as_deref().map_or((0, 0.5), best))
                        .collect()
                } else if counts[g] == 0 {
                    vec![(0, 0.5); p.sentence_vectors.len()]
                } else {
                    sums[g]
                        .iter()
                        .map(|s| {
                            let z: Vec<f32> = s.iter().map(|v| v / counts[g] as f32).collect();
                            best(&z)
                        })
                        .collect()
                };
                // A sentence a tag quotes has the tag's kind and confidence,
                // as the classifier gives it (same rules, out-of-bag scores).
                if let Some(z) = &record_z {
                    for (kind, conf) in oob_tags(z, t.tom.temperature, t.tag_calibration) {
                        let q = if p.sentence_vectors.is_empty() || counts[g] == 0 {
                            0
                        } else {
                            (0..sums[g].len())
                                .max_by(|&a, &b| sums[g][a][kind].total_cmp(&sums[g][b][kind]))
                                .unwrap_or(0)
                        };
                        if let Some(slot) = out.get_mut(q) {
                            *slot = (kind, conf);
                        }
                    }
                }
                out
            })
            .collect()
    };

    // 3. Registry links: how often a match of each case class is a gold
    // mention, then the edge calibration on (link prior, sentence kind).
    let linker = t.registry.map(Linker::new);
    let mut class = [(0usize, 0usize); 2]; // (right, all): other case, exact case
    let mut found: Vec<(bool, f64, bool, bool)> = Vec::new(); // exact, p_kind, relation right, target right
    if let Some(linker) = &linker {
        for ((r, p), sk) in t.records.iter().zip(&pooled).zip(&sentence_kinds) {
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
                let k = p
                    .sentences
                    .iter()
                    .position(|&(a, b)| a <= m.start && m.start < b)
                    .unwrap_or(0);
                let (kind, p_kind) = sk.get(k).copied().unwrap_or((0, 0.5));
                let kind_right = r.gold.tom_kinds.iter().any(|g| g == TOM_KINDS[kind]);
                found.push((m.exact_case, p_kind, kind_right, right));
            }
        }
    }
    let rate = |c: (usize, usize)| (c.0 as f64 + 1.0) / (c.1 as f64 + 2.0);
    let (link_other_case, link_exact_case) = (rate(class[0]), rate(class[1]));
    // P(relation right), on the edges whose target is right.
    let mention_rows: Vec<([f64; 2], bool)> = found
        .iter()
        .filter(|f| f.3)
        .map(|&(_, p_kind, y, _)| ([logit(p_kind), 0.0], y))
        .collect();
    let mention = fit_logistic_ridge(&mention_rows, EDGE_RIDGE);
    progress(&format!(
        "registry links: {} matches, right {:.3} in the registry's case, {:.3} in another; relation calibration {:?} on {} edges with the right target",
        class[0].1 + class[1].1,
        link_exact_case,
        link_other_case,
        mention.map(|w| (w * 1000.0).round() / 1000.0),
        mention_rows.len()
    ));

    // 4. Memory links: each training record of a goal or an unresolved
    // thread against the earlier records of its persona.
    let pool_rows = t.pool_x.to_vec2::<f32>()?;
    let record_index: std::collections::HashMap<&str, usize> = t
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    let mut link_rows: Vec<(f64, bool, f64, bool)> = Vec::new(); // cos, link right, p_kind, edge right
    for (qi, q) in t.pool.iter().enumerate() {
        let Some(&g) = record_index.get(q.id.as_str()) else {
            continue;
        };
        let threadish: Vec<usize> = ["unresolved_thread", "goal"]
            .iter()
            .filter_map(|k| TOM_KINDS.iter().position(|x| x == k))
            .collect();
        if !q
            .gold
            .tom_kinds
            .iter()
            .any(|k| k == "goal" || k == "unresolved_thread")
        {
            continue;
        }
        let mut best: Option<(usize, f32)> = None;
        for (pi, m) in t.pool.iter().enumerate() {
            if pi == qi || m.persona_id != q.persona_id || m.created_at >= q.created_at {
                continue;
            }
            let c: f32 = pool_rows[qi]
                .iter()
                .zip(&pool_rows[pi])
                .map(|(a, b)| a * b)
                .sum();
            if best.is_none_or(|(_, b)| c > b) {
                best = Some((pi, c));
            }
        }
        let Some((pi, cos)) = best else { continue };
        let Some(z) = t.record_oob.get(g).cloned().flatten() else {
            continue;
        };
        let p: Vec<f64> = z.iter().map(|&v| sigmoid_t(v, t.tom.temperature)).collect();
        let k = *threadish
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
        let p_tag = if k == top {
            t.tag_calibration.primary(p[k], p[runner])
        } else {
            t.tag_calibration.secondary(p[k], p[top])
        };
        let link_right = q.gold.links_to.contains(&t.pool[pi].id);
        let kind_right = q.gold.tom_kinds.iter().any(|x| x == TOM_KINDS[k]);
        link_rows.push((f64::from(cos), link_right, p_tag, link_right && kind_right));
    }
    let w = fit_logistic_ridge(
        &link_rows
            .iter()
            .map(|&(c, y, _, _)| ([c, 0.0], y))
            .collect::<Vec<_>>(),
        // Cosines span a few tenths: a ridge on their scale would flatten them.
        1e-4,
    );
    let memory_cosine = [w[0], w[1]];
    // Where P(link right) reaches MEMORY_LINK_MIN_P.
    let has_both = link_rows.iter().any(|r| r.1) && link_rows.iter().any(|r| !r.1);
    let memory_min_cosine = if has_both && w[1] > 0.0 {
        ((logit(MEMORY_LINK_MIN_P) - w[0]) / w[1]).clamp(0.0, 1.0)
    } else {
        // Nothing to learn from: never propose.
        1.0
    };
    let memory = fit_logistic_ridge(
        &link_rows
            .iter()
            .map(|&(c, _, p_tag, y)| {
                (
                    [
                        logit(sigmoid(memory_cosine[0] + memory_cosine[1] * c)),
                        logit(p_tag),
                    ],
                    y,
                )
            })
            .collect::<Vec<_>>(),
        EDGE_RIDGE,
    );
    let linked_q = link_rows.iter().filter(|r| r.1).count();
    let above: Vec<&(f64, bool, f64, bool)> = link_rows
        .iter()
        .filter(|r| r.0 >= memory_min_cosine)
        .collect();
    progress(&format!(
        "memory links: {} queries ({linked_q} with the right memory nearest), cosine threshold {memory_min_cosine:.3}: {} proposed, {} right",
        link_rows.len(),
        above.len(),
        above.iter().filter(|r| r.1).count()
    ));
    let calibration = EdgeCalibration {
        link_exact_case,
        link_other_case,
        mention,
        n_mentions: mention_rows.len(),
        person_min,
        memory_cosine,
        memory_min_cosine,
        memory,
        n_memory: link_rows.len(),
    };
    let metrics = json!({
        "person": {"candidates": n, "people": gold.iter().filter(|y| y[0] > 0.5).count(),
                   "person_min": person_min, "oob_precision": pp, "oob_recall": pr},
        "registry_links": {"matches_exact_case": class[1].1, "matches_other_case": class[0].1},
        "memory_links": {"queries": link_rows.len(), "nearest_is_gold": linked_q,
                         "proposed": above.len(), "proposed_right": above.iter().filter(|r| r.1).count()},
    });
    Ok(EdgeModel {
        person,
        calibration,
        metrics,
    })
}

/// The tags the classifier would emit from a record's tom_kind logits:
/// primary when its P(tag right) reaches the seed's abstain floor (0.5), a
/// second one when its own reaches [`crate::annotate::classifier::SECOND_KIND_MIN`].
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
            if c1 >= f64::from(crate::annotate::classifier::SECOND_KIND_MIN) {
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
