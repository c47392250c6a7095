//! The labeled data of one training run: the ToM-lite sets split into
//! train and dev ([`is_held_out`]), GoEmotions, the curated decisions and
//! the sensitivity records, read, checked against the vocabulary and
//! turned into examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tomlite_models::data::{
    AffectExample, LabeledRecord, SensitivityRecord, read_goemotions, read_labeled,
};

use crate::config::TrainConfig;
use crate::error::LearnError;
use crate::split::is_held_out;
use tomlite_core::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// The labeled data of one training run, split and limited.
pub(super) struct TrainingData {
    /// ToM-lite training records (outside the dev split).
    pub(super) train_records: Vec<LabeledRecord>,
    /// ToM-lite dev records ([`is_held_out`]).
    pub(super) dev_records: Vec<LabeledRecord>,
    /// The training records and their gold quotes as examples.
    pub(super) train_set: TomSet,
    /// The dev records as examples (no quotes).
    pub(super) dev_set: TomSet,
    /// GoEmotions comments.
    pub(super) goemotions: GoEmotions,
    /// How many curated decisions were read.
    pub(super) curated_decisions: usize,
    /// How many training rows each curated example counts for.
    pub(super) curated_weight: usize,
    /// The tom_kind examples of the curated decisions.
    pub(super) curated: CuratedSet,
    /// The affect and intensity examples of the curated decisions.
    pub(super) curated_labels: CuratedLabels,
    /// The curated decisions on edges.
    pub(super) curated_edges: crate::curated_edges::EdgeDecisions,
    /// sha256 of every data file.
    pub(super) data_hashes: BTreeMap<String, String>,
    /// Records labeled for sensitive content.
    pub(super) sensitivity: Vec<SensitivityRecord>,
}

/// The GoEmotions comments of one training run.
pub(super) struct GoEmotions {
    /// The whole train split (limited): fine-tuning draws its own sample.
    pub(super) for_finetuning: Vec<AffectExample>,
    /// The affect head's training comments (`max_goemotions` evenly spaced).
    pub(super) train: Vec<AffectExample>,
    /// The dev split: the affect head's calibration and figures.
    pub(super) dev: Vec<AffectExample>,
}

/// Reads the ToM-lite, GoEmotions, curated and sensitivity data, splits
/// and limits it as `cfg` says, and prints what it holds.
pub(super) fn read_training_data(
    cfg: &TrainConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<TrainingData, LearnError> {
    let take = |n: usize| cfg.limit.map_or(n, |l| l.min(n));
    let all = read_all(&cfg.tom_files)?;
    let (dev, train): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, r)| is_held_out(r));
    let path =
        |v: &[(String, LabeledRecord)]| v.first().map(|(p, _)| p.clone()).unwrap_or_default();
    let train_records: Vec<LabeledRecord> = train
        .iter()
        .map(|(_, r)| r.clone())
        .take(take(train.len()))
        .collect();
    let dev_records: Vec<LabeledRecord> = dev
        .iter()
        .map(|(_, r)| r.clone())
        .take(take(dev.len()))
        .collect();
    let train_set = tom_set(&train_records, &path(&train), true)?;
    let dev_set = tom_set(&dev_records, &path(&dev), false)?;
    let goemotions = read_goemotions_splits(cfg)?;
    progress(&format!(
        "data: {} ToM-lite train examples ({} records + quotes), {} dev records; GoEmotions {} train, {} dev",
        train_set.texts.len(),
        train_records.len(),
        dev_records.len(),
        goemotions.train.len(),
        goemotions.dev.len()
    ));
    // Curated decisions join the tom_kind head's examples (never dev, never
    // the calibration rows, which are the labeled records only).
    let curated_rows: Vec<tomlite_core::curate::CuratedRow> = match &cfg.curated {
        Some(dir) => tomlite_core::curate::Curated::load(dir)
            .map_err(|e| LearnError::Curated(Box::new(e)))?
            .rows()
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    Ok(TrainingData {
        curated: curated_set(&curated_rows),
        curated_labels: curated_labels(&curated_rows),
        curated_edges: crate::curated_edges::edge_decisions(&curated_rows),
        curated_decisions: curated_rows.len(),
        curated_weight: cfg.curated_weight,
        data_hashes: data_hashes(cfg)?,
        sensitivity: crate::sensitive::read_all(&cfg.sensitivity_files)?,
        train_records,
        dev_records,
        train_set,
        dev_set,
        goemotions,
    })
}

/// GoEmotions' train and dev splits, sampled and limited as `cfg` says.
pub(super) fn read_goemotions_splits(cfg: &TrainConfig) -> Result<GoEmotions, LearnError> {
    let take = |n: usize| cfg.limit.map_or(n, |l| l.min(n));
    let train = read_goemotions(&cfg.goemotions_train)?;
    let dev = read_goemotions(&cfg.goemotions_dev)?;
    let for_finetuning: Vec<AffectExample> = train.iter().take(take(usize::MAX)).cloned().collect();
    let train: Vec<AffectExample> = match cfg.max_goemotions {
        Some(m) if m < train.len() => {
            let step = train.len() as f64 / m as f64;
            (0..m)
                .map(|i| train[(i as f64 * step) as usize].clone())
                .collect()
        }
        _ => train,
    };
    Ok(GoEmotions {
        for_finetuning,
        train: train.into_iter().take(take(usize::MAX)).collect(),
        dev: dev.into_iter().take(take(usize::MAX)).collect(),
    })
}

pub(super) fn read_all(files: &[PathBuf]) -> Result<Vec<(String, LabeledRecord)>, LearnError> {
    let mut out = Vec::new();
    for f in files {
        for r in read_labeled(f)? {
            out.push((f.display().to_string(), r));
        }
    }
    Ok(out)
}

pub(super) struct TomSet {
    pub(super) texts: Vec<String>,
    /// Per example: the index of the record it comes from (a record and
    /// its quotes share one), so that resampling keeps them together.
    pub(super) group: Vec<usize>,
    pub(super) kinds: Vec<Vec<usize>>,
    pub(super) affect: Vec<usize>,
    pub(super) intensity: Vec<usize>,
}

impl TomSet {
    /// Whether example `i` is a record itself (the first of its group),
    /// not one of its quotes.
    pub(super) fn is_record(&self, i: usize) -> bool {
        i == 0 || self.group[i] != self.group[i - 1]
    }
}

pub(super) fn tom_set(
    records: &[LabeledRecord],
    path: &str,
    with_quotes: bool,
) -> Result<TomSet, LearnError> {
    let mut s = TomSet {
        texts: Vec::new(),
        group: Vec::new(),
        kinds: Vec::new(),
        affect: Vec::new(),
        intensity: Vec::new(),
    };
    for (g, r) in records.iter().enumerate() {
        let label = |field: &'static str, labels: &[&str], l: &str| {
            index_of(labels, l).ok_or_else(|| LearnError::Label {
                path: path.to_string(),
                id: r.id.clone(),
                field,
                label: l.to_string(),
            })
        };
        let kinds = r
            .gold
            .tom_kinds
            .iter()
            .map(|k| label("tom_kind", &TOM_KINDS, k))
            .collect::<Result<Vec<_>, _>>()?;
        let a = label("affect", &AFFECTS, &r.gold.affect)?;
        let i = label("intensity", &INTENSITIES, &r.gold.intensity)?;
        s.texts.push(r.text.clone());
        s.group.push(g);
        s.kinds.push(kinds.clone());
        s.affect.push(a);
        s.intensity.push(i);
        if with_quotes {
            // Each gold quote is also an example of its own kind: it teaches
            // the head to score single sentences, which is how quotes are chosen.
            for (q, &k) in r.gold.source_quotes.iter().zip(&kinds) {
                if q.trim() != r.text.trim() {
                    s.texts.push(q.clone());
                    s.group.push(g);
                    s.kinds.push(vec![k]);
                    s.affect.push(a);
                    s.intensity.push(i);
                }
            }
        }
    }
    Ok(s)
}

/// tom_kind examples from a curator's decisions on tags: an accepted tag is
/// an example of its kind, a relabelled one of its new kind (the record
/// and its quote each), a rejected one says only that its kind is wrong
/// there (target 0 for that kind, the others left out of the loss).
/// Edges are left to the edge model (`curated_edges`).
pub(super) struct CuratedSet {
    pub(super) texts: Vec<String>,
    pub(super) targets: Vec<Vec<f32>>,
    /// Per example: which decision it comes from (resampled together).
    pub(super) group: Vec<usize>,
    pub(super) stats: BTreeMap<&'static str, usize>,
}

pub(super) fn curated_set(rows: &[tomlite_core::curate::CuratedRow]) -> CuratedSet {
    let n = TOM_KINDS.len();
    let mut c = CuratedSet {
        texts: Vec::new(),
        targets: Vec::new(),
        group: Vec::new(),
        stats: BTreeMap::new(),
    };
    for (g, r) in rows.iter().enumerate() {
        if r.item_type == "edge" {
            continue;
        }
        let kind = |l: &Option<String>| l.as_deref().and_then(|l| index_of(&TOM_KINDS, l));
        let target = match r.decision.as_str() {
            "accept" | "relabel" => kind(&r.label).map(|k| {
                let mut t = vec![0f32; n];
                t[k] = 1.0;
                t
            }),
            "reject" => kind(&r.original_label).map(|k| {
                let mut t = vec![-1f32; n];
                t[k] = 0.0;
                t
            }),
            _ => None,
        };
        let Some(target) = target else {
            *c.stats.entry("not_usable").or_default() += 1;
            continue;
        };
        *c.stats
            .entry(match r.decision.as_str() {
                "accept" => "accepted",
                "relabel" => "relabelled",
                _ => "rejected",
            })
            .or_default() += 1;
        // For an accepted or relabelled tag the record has that kind; for
        // a rejected one, neither the record nor the quote has it.
        c.texts.push(r.record_text.clone());
        c.targets.push(target.clone());
        c.group.push(g);
        // The curator's quote, when set, replaces the queued one.
        if let Some(q) = r.decided_quote.as_ref().or(r.source_quote.as_ref())
            && !q.trim().is_empty()
            && q.trim() != r.record_text.trim()
        {
            c.texts.push(q.clone());
            c.targets.push(target);
            c.group.push(g);
        }
    }
    c
}

/// Affect and intensity examples from a curator's decisions on tags: an
/// accepted or relabelled tag says the record (and its quote) has the
/// affect and intensity the curator set, else the annotated ones. A
/// rejected tag, an edge or an annotation says nothing about either. A
/// record decided on more than one tag is one example (its first decision
/// that carries the label), each distinct quote another. These rows join
/// the heads' training rows only: never the calibration rows, never dev.
pub(super) struct CuratedLabels {
    /// The affect head's examples: texts and labels.
    pub(super) affect_texts: Vec<String>,
    pub(super) affect: Vec<usize>,
    /// The intensity head's examples: texts, labels and, per example, the
    /// decision it comes from (a record and its quote are resampled together).
    pub(super) intensity_texts: Vec<String>,
    pub(super) intensity: Vec<usize>,
    pub(super) intensity_group: Vec<usize>,
    /// Decisions that were usable for a tag but whose label is missing or
    /// not in the vocabulary, per head.
    pub(super) not_usable: BTreeMap<&'static str, usize>,
}

pub(super) fn curated_labels(rows: &[tomlite_core::curate::CuratedRow]) -> CuratedLabels {
    let mut c = CuratedLabels {
        affect_texts: Vec::new(),
        affect: Vec::new(),
        intensity_texts: Vec::new(),
        intensity: Vec::new(),
        intensity_group: Vec::new(),
        not_usable: BTreeMap::new(),
    };
    let mut seen: std::collections::BTreeSet<(&'static str, &str, &str)> = Default::default();
    for (g, r) in rows.iter().enumerate() {
        if r.item_type != "tag" || !matches!(r.decision.as_str(), "accept" | "relabel") {
            continue;
        }
        let mut texts = vec![r.record_text.as_str()];
        // The curator's quote, when set, replaces the queued one.
        if let Some(q) = r.decided_quote.as_ref().or(r.source_quote.as_ref())
            && !q.trim().is_empty()
            && q.trim() != r.record_text.trim()
        {
            texts.push(q.as_str());
        }
        let decided = |decided: &Option<String>, annotated: &Option<String>, labels: &[&str]| {
            decided
                .as_deref()
                .or(annotated.as_deref())
                .and_then(|l| index_of(labels, l))
        };
        let heads: [(&'static str, Option<usize>); 2] = [
            ("affect", decided(&r.decided_affect, &r.affect, &AFFECTS)),
            (
                "intensity",
                decided(&r.decided_intensity, &r.intensity, &INTENSITIES),
            ),
        ];
        for (head, label) in heads {
            let Some(label) = label else {
                *c.not_usable.entry(head).or_default() += 1;
                continue;
            };
            for &t in &texts {
                if !seen.insert((head, r.record_id.as_str(), t)) {
                    continue;
                }
                if head == "affect" {
                    c.affect_texts.push(t.to_string());
                    c.affect.push(label);
                } else {
                    c.intensity_texts.push(t.to_string());
                    c.intensity.push(label);
                    c.intensity_group.push(g);
                }
            }
        }
    }
    c
}

pub(super) fn multi_hot(kinds: &[Vec<usize>], n: usize) -> Vec<Vec<f32>> {
    kinds
        .iter()
        .map(|ks| {
            (0..n)
                .map(|i| if ks.contains(&i) { 1.0 } else { 0.0 })
                .collect()
        })
        .collect()
}

/// sha256 of every data file, keyed `<folder>/<file>`.
pub(super) fn data_hashes(cfg: &TrainConfig) -> Result<BTreeMap<String, String>, LearnError> {
    let mut out = BTreeMap::new();
    for f in cfg
        .tom_files
        .iter()
        .chain(&cfg.sensitivity_files)
        .chain([&cfg.goemotions_train, &cfg.goemotions_dev])
    {
        let sha = tomlite_core::hash::sha256_file(f).map_err(|source| LearnError::Io {
            path: f.clone(),
            source,
        })?;
        let name = |p: Option<&Path>| {
            p.and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        out.insert(format!("{}/{}", name(f.parent()), name(Some(f))), sha);
    }
    Ok(out)
}

pub(super) fn index_of(labels: &[&str], l: &str) -> Option<usize> {
    labels.iter().position(|x| *x == l)
}

pub(super) fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The affect index of each GoEmotions comment (unknown: neutral).
pub(super) fn affect_labels(examples: &[AffectExample]) -> Vec<usize> {
    examples
        .iter()
        .map(|e| index_of(&AFFECTS, e.affect).unwrap_or(5))
        .collect()
}

/// The texts of GoEmotions comments.
pub(super) fn comment_texts(examples: &[AffectExample]) -> Vec<&str> {
    examples.iter().map(|e| e.text.as_str()).collect()
}
