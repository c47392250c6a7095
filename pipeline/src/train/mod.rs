//! `tomlite train` and `tomlite eval`: fit the heads on the labeled data,
//! calibrate them on held-out data, and measure them.
//!
//! Data: the project's ToM-lite sets (`data/training/tom_lite/*.jsonl`,
//! and `data/training/styles/*.jsonl`, records that name their `style`)
//! and GoEmotions (train for the affect head, dev for its calibration and
//! evaluation), mapped to the six affects as docs/labeling.md says. The dev
//! split ([`is_held_out`]) holds out whole styles ([`HELD_OUT_STYLES`]),
//! and 15 % of the ids (stable hash) of the records without a style.
//!
//! Two ways to train. By default the encoder is fine-tuned first
//! ([`FineTuneConfig`]): LoRA adapters trained jointly with the three
//! heads by the models crate ([`tomlite_models::finetune`]) on the training
//! records, their gold quotes, the curated decisions and GoEmotions
//! comments; the adapters are saved beside the heads and merged into the
//! encoder, and the heads are then fitted and calibrated on the fine-tuned
//! embeddings exactly as on the frozen ones. With `--frozen` the encoder
//! stays as downloaded (the committed heads come from that path).

pub mod edges;
pub mod error;
pub mod eval;
pub mod sensitive;
pub mod split;
pub mod style_cv;
pub mod trade_off;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use tomlite_models::cues::with_cues;
use tomlite_models::data::{AffectExample, LabeledRecord, read_goemotions, read_labeled};
use tomlite_models::finetune::{Example, FineTuneOptions, FineTuner, HeadSpecs, Progress};
use tomlite_models::heads::{Card, Head, HeadCard, HeadSpec, Heads, Targets, TrainOptions};
use tomlite_models::metrics::{
    TagCalibration, classification_report, ece, fit_temperature_sigmoid, fit_temperature_softmax,
    multilabel_report, sigmoid_t,
};
use tomlite_models::{Encoder, Rows};

use crate::graph::nodes::Registry;
pub use crate::train::error::LearnError;
pub use crate::train::eval::{EvalReport, eval_goemotions, eval_records};
pub use crate::train::split::{HELD_OUT_STYLES, is_calibration, is_held_out};
use crate::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};
use tomlite_models::bagging::{BAG_MEMBERS, Bagged, class_weights, train_bagged};

/// What `tomlite train` needs.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// The encoder's directory.
    pub model_dir: PathBuf,
    /// Where to write the heads.
    pub heads_dir: PathBuf,
    /// Labeled ToM-lite JSONL files.
    pub tom_files: Vec<PathBuf>,
    /// Records labeled for sensitive content (`data/sensitivity`); none:
    /// no sensitive head.
    pub sensitivity_files: Vec<PathBuf>,
    /// GoEmotions train split (TSV).
    pub goemotions_train: PathBuf,
    /// GoEmotions dev split (TSV).
    pub goemotions_dev: PathBuf,
    /// Optimiser settings.
    pub options: TrainOptions,
    /// Use only the first N examples of each source (for quick checks).
    pub limit: Option<usize>,
    /// Use at most N GoEmotions train examples (evenly spaced through the file).
    pub max_goemotions: Option<usize>,
    /// Where embeddings of training texts are cached between runs.
    pub cache: Option<PathBuf>,
    /// The node registry of the training data (gold `mentions` are its ids).
    pub nodes: Option<PathBuf>,
    /// A staging directory whose curated decisions become examples.
    pub curated: Option<PathBuf>,
    /// Fine-tune the encoder first (`None`: frozen encoder).
    pub finetune: Option<FineTuneConfig>,
    /// Fit the heads on the encoder with an earlier run's adapters (the
    /// folder of its `adapters.safetensors` and `adapters.json`), copied
    /// into the heads folder, without fine-tuning again.
    pub adapters_from: Option<PathBuf>,
}

impl TrainConfig {
    /// Whether the heads read a fine-tuned encoder (fine-tuned now or with
    /// an earlier run's adapters): then only the calibration records it
    /// never saw are honest for temperatures and calibration.
    pub fn tunes_encoder(&self) -> bool {
        self.finetune.is_some() || self.adapters_from.is_some()
    }
}

/// How `tomlite train` fine-tunes the encoder.
#[derive(Debug, Clone)]
pub struct FineTuneConfig {
    /// Passes over the examples.
    pub epochs: usize,
    /// Seed of the adapters, the heads, the batch order and the
    /// GoEmotions sample.
    pub seed: u64,
    /// GoEmotions comments per epoch, drawn afresh each epoch (seeded)
    /// from the whole train split.
    pub goemotions: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Longest training sequence in tokens.
    pub max_tokens: usize,
    /// Continue from the checkpoint of an interrupted run with the same
    /// settings and data.
    pub resume: bool,
}

impl Default for FineTuneConfig {
    fn default() -> Self {
        let lib = FineTuneOptions::default();
        Self {
            epochs: lib.epochs,
            seed: lib.seed,
            goemotions: 12_000,
            batch_size: lib.batch_size,
            max_tokens: lib.max_tokens,
            resume: false,
        }
    }
}

/// Folder of the fine-tuning checkpoint, inside the output folder.
pub const CHECKPOINT_DIR: &str = "checkpoint";

fn index_of(labels: &[&str], l: &str) -> Option<usize> {
    labels.iter().position(|x| *x == l)
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Embeds texts with a progress line on stderr. With a cache directory,
/// the embeddings of the same texts under the same encoder are read back
/// instead of recomputed (`<cache>/<sha256>.safetensors`).
fn embed(
    encoder: &Encoder,
    texts: &[&str],
    what: &str,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Rows, LearnError> {
    let file = cache.map(|c| c.join(format!("{}.safetensors", embedding_key(encoder, texts))));
    if let Some(f) = &file
        && let Ok(cached) = Rows::read_safetensors(f, "embeddings")
        && (cached.len(), cached.dim()) == (texts.len(), encoder.dim())
    {
        progress(&format!(
            "embedding {what}: {} texts read from the cache {}",
            texts.len(),
            f.display()
        ));
        return Ok(cached);
    }
    let embeddings = embed_in_chunks(encoder, texts, what, progress)?;
    if let (Some(f), Some(c)) = (&file, cache) {
        // The cache is an optimisation: failing to write it is not an error.
        if std::fs::create_dir_all(c).is_ok() {
            let _ = embeddings.write_safetensors(f, "embeddings");
        }
    }
    Ok(embeddings)
}

/// The cache key of `texts`' embeddings: sha256 of the encoder (and its
/// adapters) and of the texts.
fn embedding_key(encoder: &Encoder, texts: &[&str]) -> String {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    h.update(encoder.sha256().as_bytes());
    // A fine-tuned encoder embeds differently: its own cache entries.
    if let Some(a) = encoder.adapters_sha256() {
        h.update(b"lora");
        h.update(a.as_bytes());
    }
    for t in texts {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Encodes `texts` 512 at a time, with a progress line after each chunk.
fn embed_in_chunks(
    encoder: &Encoder,
    texts: &[&str],
    what: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Rows, LearnError> {
    let mut rows: Vec<f32> = Vec::with_capacity(texts.len() * encoder.dim());
    let chunk = 512;
    let started = std::time::Instant::now();
    for (i, part) in texts.chunks(chunk).enumerate() {
        let e = encoder.encode(part)?;
        for v in e.embeddings {
            rows.extend(v);
        }
        let done = (i * chunk + part.len()).min(texts.len());
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        progress(&format!(
            "embedding {what}: {done}/{} texts ({rate:.0}/s, ETA {:.0}s)",
            texts.len(),
            (texts.len() - done) as f64 / rate.max(1e-9)
        ));
    }
    Ok(Rows::new(rows, encoder.dim())?)
}

struct TomSet {
    texts: Vec<String>,
    /// Per example: the index of the record it comes from (a record and
    /// its quotes share one), so that resampling keeps them together.
    group: Vec<usize>,
    kinds: Vec<Vec<usize>>,
    affect: Vec<usize>,
    intensity: Vec<usize>,
}

impl TomSet {
    /// Whether example `i` is a record itself (the first of its group),
    /// not one of its quotes.
    fn is_record(&self, i: usize) -> bool {
        i == 0 || self.group[i] != self.group[i - 1]
    }
}

fn tom_set(records: &[LabeledRecord], path: &str, with_quotes: bool) -> Result<TomSet, LearnError> {
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
/// Edges are counted, not used: the heads learn no edges.
struct CuratedSet {
    texts: Vec<String>,
    targets: Vec<Vec<f32>>,
    /// Per example: which decision it comes from (resampled together).
    group: Vec<usize>,
    stats: BTreeMap<&'static str, usize>,
}

fn curated_set(rows: &[crate::curate::CuratedRow]) -> CuratedSet {
    let n = TOM_KINDS.len();
    let mut c = CuratedSet {
        texts: Vec::new(),
        targets: Vec::new(),
        group: Vec::new(),
        stats: BTreeMap::new(),
    };
    for (g, r) in rows.iter().enumerate() {
        if r.item_type == "edge" {
            *c.stats.entry("edges_not_used").or_default() += 1;
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
        if let Some(q) = &r.source_quote
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

fn multi_hot(kinds: &[Vec<usize>], n: usize) -> Vec<Vec<f32>> {
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
fn data_hashes(cfg: &TrainConfig) -> Result<BTreeMap<String, String>, LearnError> {
    let mut out = BTreeMap::new();
    for f in cfg
        .tom_files
        .iter()
        .chain(&cfg.sensitivity_files)
        .chain([&cfg.goemotions_train, &cfg.goemotions_dev])
    {
        let sha = crate::hash::sha256_file(f).map_err(|source| LearnError::Io {
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

/// What fine-tuning trains on.
struct FineTuneData<'a> {
    records: &'a [LabeledRecord],
    tr: &'a TomSet,
    cur: &'a CuratedSet,
    goemotions: &'a [AffectExample],
    /// Records labeled for sensitive content (all of them: the held-out
    /// styles and the calibration slice are left out here).
    sensitivity: &'a [tomlite_models::data::SensitivityRecord],
    data_hashes: &'a BTreeMap<String, String>,
}

/// The adapters a fine-tuning run saved.
struct FineTunedInfo {
    /// sha256 of the adapters file.
    sha256: String,
    /// What the heads' card says of the run.
    summary: serde_json::Value,
}

/// The fine-tuning examples: each training record (all three heads) and
/// its gold quotes (tom_kind), except the calibration slice
/// ([`is_calibration`]); the curated decisions (tom_kind); every GoEmotions
/// train comment (affect only: the fine-tuning draws its share of them
/// afresh each epoch).
fn finetune_examples(data: &FineTuneData<'_>) -> Vec<Example> {
    let kinds = TOM_KINDS.len();
    let tr = data.tr;
    let mut out = Vec::with_capacity(tr.texts.len() + data.cur.texts.len() + data.goemotions.len());
    let targets = multi_hot(&tr.kinds, kinds);
    for (i, text) in tr.texts.iter().enumerate() {
        let g = tr.group[i];
        if is_calibration(&data.records[g].id) {
            continue;
        }
        out.push(if tr.is_record(i) {
            let mut e = Example::record(
                text.clone(),
                targets[i].clone(),
                tr.affect[i] as u32,
                tr.intensity[i] as u32,
            );
            // An ordinary memory is a weak negative of the sensitive head.
            if !data.sensitivity.is_empty() && !crate::train::sensitive::may_be_sensitive(text) {
                e.sensitive = Some(0);
            }
            e
        } else {
            Example::sentence(text.clone(), targets[i].clone())
        });
    }
    for (text, t) in data.cur.texts.iter().zip(&data.cur.targets) {
        out.push(Example::sentence(text.clone(), t.clone()));
    }
    // Sensitive content: each training record and its line (the quote),
    // outside the held-out styles and the calibration slice.
    for r in data.sensitivity {
        if crate::train::sensitive::is_held_out(r) || is_calibration(&r.id) {
            continue;
        }
        let Some(label) = crate::train::sensitive::label_index(r) else {
            continue;
        };
        // A long sensitive record is sensitive by one passage, its line:
        // as a whole it would teach that its ordinary passages are too
        // (`reads_whole_text`). A long control is not sensitive as a whole.
        let passages = crate::segment::passages(&r.text).len();
        if label == 0 || crate::annotate::sensitive::reads_whole_text(passages) {
            out.push(Example::sensitive_only(r.text.clone(), label as u32));
        }
        if let Some(q) = r.sensitivity.quote.as_deref().filter(|_| label > 0)
            && q != r.text
        {
            out.push(Example::sensitive_only(q, label as u32));
        }
    }
    for e in data.goemotions {
        out.push(Example::affect_only(
            e.text.clone(),
            index_of(&AFFECTS, e.affect).unwrap_or(5) as u32,
        ));
    }
    out
}

/// The heads trained with the adapters: the three ToM-lite heads, and the
/// sensitive head when an example labels it.
fn finetune_specs(examples: &[Example]) -> HeadSpecs {
    let spec = |name: &str, labels: Vec<String>, multi_label: bool| HeadSpec {
        wording_cues: false,
        name: name.into(),
        labels,
        multi_label,
        hidden: 0,
    };
    let labels = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
    HeadSpecs {
        tom_kind: spec("tom_kind", labels(&TOM_KINDS), true),
        affect: spec("affect", labels(&AFFECTS), false),
        intensity: spec("intensity", labels(&INTENSITIES), false),
        sensitive: examples
            .iter()
            .any(|e| e.sensitive.is_some())
            .then(|| spec("sensitive", crate::annotate::sensitive::labels(), false)),
    }
}

/// Per class of `n`: the mean of [`class_weights`]' per-example weights
/// (1 for a class without examples).
fn per_class_weights(labels: Vec<usize>, n: usize) -> Vec<f32> {
    let weights = class_weights(&labels, n);
    (0..n)
        .map(|class| {
            labels
                .iter()
                .zip(&weights)
                .find(|(l, _)| **l == class)
                .map_or(1.0, |(_, w)| *w)
        })
        .collect()
}

/// The models crate's fine-tuning options for `ft`: class weights of the
/// single-label heads from the examples, checkpoints in `checkpoint_dir`.
fn finetune_options(
    ft: &FineTuneConfig,
    examples: &[Example],
    specs: &HeadSpecs,
    checkpoint_dir: PathBuf,
) -> FineTuneOptions {
    let labels_of = |label: fn(&Example) -> Option<u32>| -> Vec<usize> {
        examples
            .iter()
            .filter_map(|e| label(e).map(|l| l as usize))
            .collect()
    };
    FineTuneOptions {
        epochs: ft.epochs,
        seed: ft.seed,
        batch_size: ft.batch_size,
        max_tokens: ft.max_tokens,
        affect_class_weights: per_class_weights(labels_of(|e| e.affect), AFFECTS.len()),
        intensity_class_weights: per_class_weights(labels_of(|e| e.intensity), INTENSITIES.len()),
        sensitive_class_weights: if specs.sensitive.is_some() {
            per_class_weights(
                labels_of(|e| e.sensitive),
                crate::annotate::sensitive::labels().len(),
            )
        } else {
            Vec::new()
        },
        affect_only_per_epoch: Some(ft.goemotions),
        checkpoint_dir: Some(checkpoint_dir),
        resume: ft.resume,
        ..FineTuneOptions::default()
    }
}

/// Fine-tunes the encoder's adapters with the three heads (models crate),
/// checkpointing each epoch into `<heads_dir>/checkpoint`, and saves the
/// adapters and their card into the heads directory.
fn finetune(
    cfg: &TrainConfig,
    ft: &FineTuneConfig,
    data: &FineTuneData<'_>,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(&Progress),
) -> Result<FineTunedInfo, LearnError> {
    let started = std::time::Instant::now();
    let tuner = FineTuner::load(&cfg.model_dir)?;
    let examples = finetune_examples(data);
    let count = |f: fn(&Example) -> bool| examples.iter().filter(|e| f(e)).count();
    let specs = finetune_specs(&examples);
    let checkpoint_dir = cfg.heads_dir.join(CHECKPOINT_DIR);
    let resumable = checkpoint_dir
        .join(tomlite_models::finetune::CHECKPOINT_STATE_FILE)
        .is_file();
    let opts = finetune_options(ft, &examples, &specs, checkpoint_dir);
    let goemotions = count(|e| e.tom_kind.is_none() && e.sensitive.is_none());
    let per_epoch = examples.len() - goemotions + ft.goemotions.min(goemotions);
    progress(&format!(
        "fine-tuning {} (per epoch {per_epoch} examples: {} records, {} sentences, {} sensitivity examples, {} of {goemotions} GoEmotions drawn afresh; {} epochs of {} steps, LoRA rank {}, similarity weight {}, seed {}{})",
        cfg.model_dir.display(),
        count(|e| e.intensity.is_some()),
        count(|e| e.tom_kind.is_some() && e.intensity.is_none()),
        count(|e| e.sensitive.is_some()),
        ft.goemotions.min(goemotions),
        opts.epochs,
        per_epoch.div_ceil(opts.batch_size),
        opts.lora.rank,
        opts.similarity_weight,
        opts.seed,
        match (ft.resume, resumable) {
            (true, true) => ", resuming from its checkpoint",
            (true, false) => ", --resume: no checkpoint yet, from the start",
            _ => "",
        },
    ));
    let tuned = tuner.train(&examples, &specs, &opts, steps)?;
    let seconds = started.elapsed().as_secs_f64();
    let figures = json!({
        "epoch_losses": tuned.epoch_losses,
        "train_seconds": (seconds * 10.0).round() / 10.0,
        "examples_per_epoch": per_epoch,
        "record_examples": count(|e| e.intensity.is_some()),
        "sentence_examples": count(|e| e.tom_kind.is_some() && e.intensity.is_none()),
        "sensitivity_examples": count(|e| e.sensitive.is_some()),
        "goemotions_per_epoch": ft.goemotions.min(goemotions),
        "goemotions_pool": goemotions,
        "similarity_weight": opts.similarity_weight,
        "calibration_records_held_back": data.records.iter().filter(|r| is_calibration(&r.id)).count(),
        "held_out_styles": HELD_OUT_STYLES,
    });
    let card = tuned.card(json!({"files": data.data_hashes}), figures.clone());
    let sha256 = tuned.save(&cfg.heads_dir, &card)?;
    progress(&format!(
        "adapters written to {} (sha256 {}), {:.0}s",
        cfg.heads_dir.display(),
        &sha256[..12],
        seconds
    ));
    Ok(FineTunedInfo {
        summary: json!({
            "adapters_sha256": sha256,
            "seed": opts.seed,
            "epochs": opts.epochs,
            "lora": opts.lora,
            "figures": figures,
        }),
        sha256,
    })
}

fn read_all(files: &[PathBuf]) -> Result<Vec<(String, LabeledRecord)>, LearnError> {
    let mut out = Vec::new();
    for f in files {
        for r in read_labeled(f)? {
            out.push((f.display().to_string(), r));
        }
    }
    Ok(out)
}

/// Trains, calibrates and saves the heads; returns the card.
pub fn train(cfg: &TrainConfig, progress: &mut dyn FnMut(&str)) -> Result<Card, LearnError> {
    train_with_steps(cfg, progress, &mut |_| {})
}

/// [`train`], with `steps` called after every fine-tuning step.
pub fn train_with_steps(
    cfg: &TrainConfig,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(&Progress),
) -> Result<Card, LearnError> {
    let data = read_training_data(cfg, progress)?;
    let finetuned = finetune_or_clear(cfg, &data, progress, steps)?;
    let encoder = load_encoder(cfg, finetuned.is_some())?;
    let cache = cfg.cache.as_deref();
    let embedded = embed_sets(&encoder, &data, cache, progress)?;
    // The intensity head reads the wording cues too (the steps decide
    // intensity by them); the affect head reads the embedding alone (with
    // the cues its dev macro-F1 fell from 0.577 to 0.560).
    let cued = embedded.with_cues(&data)?;
    // The small linear heads (few hundred examples per label, unit-norm
    // inputs) need a larger step and more passes than the affect MLP.
    let small = TrainOptions {
        epochs: cfg.options.epochs * 2,
        learning_rate: cfg.options.learning_rate * 10.0,
        ..cfg.options.clone()
    };
    let mut losses = EpochLosses::new();
    let tom_bag = train_tom_head(
        &encoder,
        &data,
        &embedded,
        cache,
        &small,
        &mut losses,
        progress,
    )?;
    let mut tom = tom_bag.head;
    let mut affect = train_affect_head(cfg, &data, &embedded, &mut losses)?;
    let intensity_bag = train_intensity_head(&data, &cued.tom_train, &small, &mut losses)?;
    let mut intensity = intensity_bag.head;
    report_epoch_losses(&losses, progress);

    let honest = honest_rows(cfg, &data);
    let tag_calibration = calibrate_tom(&mut tom, &tom_bag.oob, &honest, &data, progress);
    let tom_bag_view = TomBag {
        head: &tom,
        members: &tom_bag.members,
        oob: &tom_bag.oob,
    };
    let edge_model = train_edge_model(
        cfg,
        &encoder,
        &data,
        &tom_bag_view,
        &tag_calibration,
        &small,
        progress,
    )?;
    let sensitive = train_sensitive_head(cfg, &encoder, &data, &small, progress)?;
    calibrate_intensity(&mut intensity, &intensity_bag.oob, &honest, &data, progress);
    calibrate_affect(cfg, &mut affect, &data, &embedded, progress)?;
    progress(&format!(
        "temperatures: tom_kind {:.3}, affect {:.3}, intensity {:.3}",
        tom.temperature, affect.temperature, intensity.temperature
    ));
    let dev = dev_metrics(
        &tom,
        &affect,
        &intensity,
        &data,
        (&embedded, &cued),
        progress,
    )?;
    let card = heads_card(&CardInputs {
        cfg,
        encoder_sha256: encoder.sha256(),
        data: &data,
        tom: &tom,
        affect: &affect,
        intensity: &intensity,
        edge_model: &edge_model,
        sensitive: sensitive.as_ref(),
        dev,
        finetuned: finetuned.as_ref(),
        losses: &losses,
        tag_calibration: &tag_calibration,
    });
    let heads = Heads {
        tom_kind: tom,
        affect,
        intensity,
        person: Some(edge_model.person),
        sensitive_lexical: sensitive.as_ref().map(|t| t.lexical.clone()),
        sensitive: sensitive.map(|t| t.head),
        card,
    };
    save_heads(cfg, heads, finetuned.is_some())
}

/// The encoder the heads read: with the adapters fine-tuning just wrote,
/// or as downloaded.
fn load_encoder(cfg: &TrainConfig, finetuned: bool) -> Result<Encoder, LearnError> {
    Ok(if finetuned {
        Encoder::load_with_adapters(
            &cfg.model_dir,
            &cfg.heads_dir.join(tomlite_models::finetune::ADAPTERS_FILE),
            tomlite_models::EncodeOptions::default(),
        )?
    } else {
        Encoder::load(&cfg.model_dir)?
    })
}

/// Saves the heads into the output folder; after fine-tuning, the
/// adapters' card also gets the heads' dev figures. Returns the card.
fn save_heads(cfg: &TrainConfig, mut heads: Heads, finetuned: bool) -> Result<Card, LearnError> {
    heads.save(&cfg.heads_dir)?;
    if finetuned {
        // The adapters' card also carries the dev figures of the heads
        // fitted on them (the card's hashes are unchanged).
        let dev: BTreeMap<&str, serde_json::Value> = heads
            .card
            .heads
            .iter()
            .map(|h| (h.spec.name.as_str(), h.metrics.clone()))
            .collect();
        add_card_figures(&cfg.heads_dir, json!({"dev": dev}))?;
    }
    Ok(heads.card)
}

/// The labeled data of one training run, split and limited.
struct TrainingData {
    /// ToM-lite training records (outside the dev split).
    train_records: Vec<LabeledRecord>,
    /// ToM-lite dev records ([`is_held_out`]).
    dev_records: Vec<LabeledRecord>,
    /// The training records and their gold quotes as examples.
    train_set: TomSet,
    /// The dev records as examples (no quotes).
    dev_set: TomSet,
    /// GoEmotions comments.
    goemotions: GoEmotions,
    /// How many curated decisions were read.
    curated_decisions: usize,
    /// The tom_kind examples of the curated decisions.
    curated: CuratedSet,
    /// sha256 of every data file.
    data_hashes: BTreeMap<String, String>,
    /// Records labeled for sensitive content.
    sensitivity: Vec<tomlite_models::data::SensitivityRecord>,
}

/// The GoEmotions comments of one training run.
struct GoEmotions {
    /// The whole train split (limited): fine-tuning draws its own sample.
    for_finetuning: Vec<AffectExample>,
    /// The affect head's training comments (`max_goemotions` evenly spaced).
    train: Vec<AffectExample>,
    /// The dev split: the affect head's calibration and figures.
    dev: Vec<AffectExample>,
}

/// Reads the ToM-lite, GoEmotions, curated and sensitivity data, splits
/// and limits it as `cfg` says, and prints what it holds.
fn read_training_data(
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
    let curated_rows: Vec<crate::curate::CuratedRow> = match &cfg.curated {
        Some(dir) => crate::curate::Curated::load(dir)
            .map_err(|e| LearnError::Curated(Box::new(e)))?
            .rows()
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    Ok(TrainingData {
        curated: curated_set(&curated_rows),
        curated_decisions: curated_rows.len(),
        data_hashes: data_hashes(cfg)?,
        sensitivity: crate::train::sensitive::read_all(&cfg.sensitivity_files)?,
        train_records,
        dev_records,
        train_set,
        dev_set,
        goemotions,
    })
}

/// GoEmotions' train and dev splits, sampled and limited as `cfg` says.
fn read_goemotions_splits(cfg: &TrainConfig) -> Result<GoEmotions, LearnError> {
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

/// Fine-tunes the encoder when `cfg` asks for it; otherwise removes the
/// adapters an earlier fine-tuning run left in the output folder.
fn finetune_or_clear(
    cfg: &TrainConfig,
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(&Progress),
) -> Result<Option<FineTunedInfo>, LearnError> {
    if let Some(ft) = &cfg.finetune {
        let inputs = FineTuneData {
            records: &data.train_records,
            tr: &data.train_set,
            cur: &data.curated,
            goemotions: &data.goemotions.for_finetuning,
            sensitivity: &data.sensitivity,
            data_hashes: &data.data_hashes,
        };
        return finetune(cfg, ft, &inputs, progress, steps).map(Some);
    }
    if let Some(from) = &cfg.adapters_from {
        return reuse_adapters(from, &cfg.heads_dir, progress).map(Some);
    }
    // Adapters left in the folder by a fine-tuning run belong to other
    // heads than the ones written here: the classifier would refuse the
    // pair.
    for f in [
        tomlite_models::finetune::ADAPTERS_FILE,
        tomlite_models::finetune::ADAPTERS_CARD_FILE,
    ] {
        let p = cfg.heads_dir.join(f);
        if p.is_file() {
            std::fs::remove_file(&p).map_err(|source| LearnError::Remove {
                path: p.clone(),
                source,
            })?;
            progress(&format!(
                "removed {} (adapters of earlier heads; these are trained without)",
                p.display()
            ));
        }
    }
    Ok(None)
}

/// Copies an earlier run's adapters and their card into `heads_dir` (after
/// checking the file's hash against the card), so that the heads fitted
/// next belong to them; the card's run summary goes into the heads' card.
fn reuse_adapters(
    from: &Path,
    heads_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<FineTunedInfo, LearnError> {
    let (_, card) = tomlite_models::finetune::FineTuned::load(from)?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(from, heads_dir) {
        std::fs::create_dir_all(heads_dir).map_err(|source| LearnError::Write {
            path: heads_dir.to_path_buf(),
            source,
        })?;
        for f in [
            tomlite_models::finetune::ADAPTERS_FILE,
            tomlite_models::finetune::ADAPTERS_CARD_FILE,
        ] {
            let (src, dst) = (from.join(f), heads_dir.join(f));
            std::fs::copy(&src, &dst).map_err(|source| LearnError::Write {
                path: dst.clone(),
                source,
            })?;
        }
    }
    progress(&format!(
        "fitting the heads on the encoder with the adapters of {} (sha256 {}, {} epochs, seed {}); no fine-tuning",
        from.display(),
        &card.adapters_sha256[..12.min(card.adapters_sha256.len())],
        card.epochs,
        card.seed
    ));
    // The adapters' card carries the dev figures of the heads last fitted
    // on them; the heads fitted now have their own, so only the run's own
    // figures (losses, examples, time) go into the new card.
    let mut figures = card.figures;
    if let Some(f) = figures.as_object_mut() {
        f.remove("dev");
    }
    Ok(FineTunedInfo {
        summary: json!({
            "adapters_sha256": card.adapters_sha256,
            "seed": card.seed,
            "epochs": card.epochs,
            "lora": card.lora,
            "figures": figures,
            "heads_refitted_from": from.display().to_string(),
        }),
        sha256: card.adapters_sha256,
    })
}

/// The embeddings the heads are trained, calibrated and measured on.
struct Embedded {
    /// ToM-lite training examples (records and quotes).
    tom_train: Rows,
    /// ToM-lite dev records.
    tom_dev: Rows,
    /// The affect head's GoEmotions training comments.
    goemotions_train: Rows,
    /// GoEmotions dev comments.
    goemotions_dev: Rows,
}

/// The ToM-lite rows with each text's wording cues appended
/// ([`tomlite_models::cues`]): what the intensity head reads.
struct Cued {
    tom_train: Rows,
    tom_dev: Rows,
}

impl Embedded {
    fn with_cues(&self, data: &TrainingData) -> Result<Cued, LearnError> {
        Ok(Cued {
            tom_train: with_cues(&self.tom_train, &refs(&data.train_set.texts))?,
            tom_dev: with_cues(&self.tom_dev, &refs(&data.dev_set.texts))?,
        })
    }
}

/// The texts of GoEmotions comments.
fn comment_texts(examples: &[AffectExample]) -> Vec<&str> {
    examples.iter().map(|e| e.text.as_str()).collect()
}

fn embed_sets(
    encoder: &Encoder,
    data: &TrainingData,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Embedded, LearnError> {
    let train_texts = refs(&data.train_set.texts);
    let dev_texts = refs(&data.dev_set.texts);
    Ok(Embedded {
        tom_train: embed(encoder, &train_texts, "ToM-lite train", cache, progress)?,
        tom_dev: embed(encoder, &dev_texts, "ToM-lite dev", cache, progress)?,
        goemotions_train: embed(
            encoder,
            &comment_texts(&data.goemotions.train),
            "GoEmotions train",
            cache,
            progress,
        )?,
        goemotions_dev: embed(
            encoder,
            &comment_texts(&data.goemotions.dev),
            "GoEmotions dev",
            cache,
            progress,
        )?,
    })
}

/// Per head and epoch, the training loss: one entry per bagged member.
type EpochLosses = Vec<(String, usize, f64)>;

/// tom_kind: multi-label, bagged, on the ToM-lite texts and gold quotes
/// and the curated examples.
fn train_tom_head(
    encoder: &Encoder,
    data: &TrainingData,
    embedded: &Embedded,
    cache: Option<&Path>,
    small: &TrainOptions,
    losses: &mut EpochLosses,
    progress: &mut dyn FnMut(&str),
) -> Result<Bagged, LearnError> {
    let spec = HeadSpec {
        wording_cues: false,
        name: "tom_kind".into(),
        labels: TOM_KINDS.iter().map(|s| s.to_string()).collect(),
        multi_label: true,
        hidden: 0,
    };
    let (train_set, curated) = (&data.train_set, &data.curated);
    let mut targets = multi_hot(&train_set.kinds, TOM_KINDS.len());
    let mut group = train_set.group.clone();
    let embeddings = if curated.texts.is_empty() {
        embedded.tom_train.clone()
    } else {
        progress(&format!(
            "curated: {} decisions give {} tom_kind examples ({:?})",
            data.curated_decisions,
            curated.texts.len(),
            curated.stats
        ));
        let curated_x = embed(encoder, &refs(&curated.texts), "curated", cache, progress)?;
        let offset = train_set.group.iter().max().map_or(0, |g| g + 1);
        targets.extend(curated.targets.iter().cloned());
        group.extend(curated.group.iter().map(|g| g + offset));
        Rows::concat(&[&embedded.tom_train, &curated_x])?
    };
    Ok(train_bagged(
        &spec,
        &embeddings,
        &Targets::Multi(targets),
        &group,
        small,
        |_, e, l| losses.push(("tom_kind".to_string(), e, l)),
    )?)
}

/// The affect index of each GoEmotions comment (unknown: neutral).
fn affect_labels(examples: &[AffectExample]) -> Vec<usize> {
    examples
        .iter()
        .map(|e| index_of(&AFFECTS, e.affect).unwrap_or(5))
        .collect()
}

/// affect: an MLP on GoEmotions train plus the ToM-lite train records,
/// class-weighted.
fn train_affect_head(
    cfg: &TrainConfig,
    data: &TrainingData,
    embedded: &Embedded,
    losses: &mut EpochLosses,
) -> Result<Head, LearnError> {
    let embeddings = Rows::concat(&[&embedded.goemotions_train, &embedded.tom_train])?;
    let mut labels = affect_labels(&data.goemotions.train);
    labels.extend(&data.train_set.affect);
    affect_mlp(cfg, &embeddings, &labels, &mut |e, l| {
        losses.push(("affect".to_string(), e, l))
    })
}

/// The affect MLP on `embeddings` and their `labels`, class-weighted.
fn affect_mlp(
    cfg: &TrainConfig,
    embeddings: &Rows,
    labels: &[usize],
    loss: &mut dyn FnMut(usize, f64),
) -> Result<Head, LearnError> {
    let spec = HeadSpec {
        wording_cues: false,
        name: "affect".into(),
        labels: AFFECTS.iter().map(|s| s.to_string()).collect(),
        multi_label: false,
        hidden: 512,
    };
    Ok(Head::train(
        spec,
        embeddings,
        &Targets::Single {
            labels: labels.iter().map(|&l| l as u32).collect(),
            weights: class_weights(labels, AFFECTS.len()),
        },
        // The MLP overfits GoEmotions past a few passes (train loss 0.28 and
        // a calibration temperature of 2.0 after 30): a quarter of the passes.
        &TrainOptions {
            batch_size: 256,
            epochs: cfg.options.epochs.div_ceil(4),
            ..cfg.options.clone()
        },
        loss,
    )?)
}

/// intensity: bagged, on the ToM-lite training examples only (`x`: their
/// embeddings with the wording cues).
fn train_intensity_head(
    data: &TrainingData,
    x: &Rows,
    small: &TrainOptions,
    losses: &mut EpochLosses,
) -> Result<Bagged, LearnError> {
    let spec = HeadSpec {
        wording_cues: true,
        name: "intensity".into(),
        labels: INTENSITIES.iter().map(|s| s.to_string()).collect(),
        multi_label: false,
        hidden: 0,
    };
    let labels = &data.train_set.intensity;
    Ok(train_bagged(
        &spec,
        x,
        &Targets::Single {
            labels: labels.iter().map(|&l| l as u32).collect(),
            weights: class_weights(labels, INTENSITIES.len()),
        },
        &data.train_set.group,
        small,
        |_, e, l| losses.push(("intensity".to_string(), e, l)),
    )?)
}

/// One line per head and epoch; a bagged head's loss is its members' mean.
fn report_epoch_losses(losses: &EpochLosses, progress: &mut dyn FnMut(&str)) {
    // (head, epoch, sum of the losses, members)
    let mut per_epoch: Vec<(String, usize, f64, usize)> = Vec::new();
    for (name, epoch, loss) in losses {
        match per_epoch
            .iter_mut()
            .find(|(n, e, _, _)| n == name && e == epoch)
        {
            Some(entry) => {
                entry.2 += loss;
                entry.3 += 1;
            }
            None => per_epoch.push((name.clone(), *epoch, *loss, 1)),
        }
    }
    for (name, epoch, sum, members) in &per_epoch {
        let bag = if *members > 1 {
            format!(" (mean of {members} bagged members)")
        } else {
            String::new()
        };
        progress(&format!(
            "{name}: epoch {epoch:>3} loss {:.4}{bag}",
            sum / *members as f64
        ));
    }
}

/// Per training example: whether its out-of-bag logits are an honest
/// held-out score for calibration. Only a record's own text counts (the
/// classifier scores records, not quotes), and after fine-tuning only the
/// records the encoder did not see.
fn honest_rows(cfg: &TrainConfig, data: &TrainingData) -> Vec<bool> {
    let set = &data.train_set;
    (0..set.group.len())
        .map(|i| {
            let unseen =
                !cfg.tunes_encoder() || is_calibration(&data.train_records[set.group[i]].id);
            set.is_record(i) && unseen
        })
        .collect()
}

/// The honest rows ([`honest_rows`]) that have out-of-bag logits.
fn oob_rows(honest: &[bool], oob: &[Option<Vec<f32>>]) -> Vec<usize> {
    (0..honest.len().min(oob.len()))
        .filter(|&i| honest[i] && oob[i].is_some())
        .collect()
}

/// Fits the tom_kind temperature on the bag's out-of-bag logits, then
/// P(tag right) from the two best kinds on the same rows.
fn calibrate_tom(
    tom: &mut Head,
    oob: &[Option<Vec<f32>>],
    honest: &[bool],
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
) -> TagCalibration {
    let kinds = &data.train_set.kinds;
    let rows = oob_rows(honest, oob);
    let logits: Vec<Vec<f32>> = rows.iter().filter_map(|&i| oob[i].clone()).collect();
    let gold: Vec<Vec<bool>> = rows
        .iter()
        .map(|&i| {
            (0..TOM_KINDS.len())
                .map(|k| kinds[i].contains(&k))
                .collect()
        })
        .collect();
    tom.temperature = fit_temperature_sigmoid(&logits, &gold);
    let tag_rows: Vec<(Vec<f64>, Vec<usize>)> = rows
        .iter()
        .zip(&logits)
        .map(|(&i, z)| {
            let p = z.iter().map(|&v| sigmoid_t(v, tom.temperature)).collect();
            (p, kinds[i].clone())
        })
        .collect();
    let tag_calibration = TagCalibration::fit(&tag_rows);
    progress(&format!(
        "tag calibration: primary {:?}, secondary {:?}",
        tag_calibration
            .primary
            .map(|w| (w * 1000.0).round() / 1000.0),
        tag_calibration
            .secondary
            .map(|w| (w * 1000.0).round() / 1000.0)
    ));
    tag_calibration
}

/// The tom_kind head with its bag's members and out-of-bag logits.
struct TomBag<'a> {
    head: &'a Head,
    members: &'a [(Head, Vec<bool>)],
    oob: &'a [Option<Vec<f32>>],
}

/// Edges: the person head and the edge calibrations, on the training
/// records, with every labeled record as the memory pool.
fn train_edge_model(
    cfg: &TrainConfig,
    encoder: &Encoder,
    data: &TrainingData,
    tom: &TomBag<'_>,
    tag_calibration: &TagCalibration,
    small: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<crate::train::edges::EdgeModel, LearnError> {
    let registry = match &cfg.nodes {
        Some(p) => Some(Registry::load(p).map_err(|e| LearnError::Nodes(Box::new(e)))?),
        None => None,
    };
    let records = &data.train_records;
    let pool: Vec<LabeledRecord> = records.iter().chain(&data.dev_records).cloned().collect();
    let pool_texts: Vec<&str> = pool.iter().map(|r| r.text.as_str()).collect();
    let cache = cfg.cache.as_deref();
    let pool_x = embed(encoder, &pool_texts, "memory pool", cache, progress)?;
    // Each record's first example is its own text.
    let mut first_example = vec![None; records.len()];
    for (i, &g) in data.train_set.group.iter().enumerate() {
        if first_example[g].is_none() {
            first_example[g] = Some(i);
        }
    }
    // Only the records whose people were labeled teach the person and
    // edge heads (every record stays in the memory pool).
    let (records, record_oob): (Vec<LabeledRecord>, Vec<Option<Vec<f32>>>) = records
        .iter()
        .zip(&first_example)
        .filter(|(r, _)| r.gold.people_labeled)
        .map(|(r, i)| (r.clone(), i.and_then(|i| tom.oob[i].clone())))
        .unzip();
    crate::train::edges::train_edges(
        &crate::train::edges::EdgeTraining {
            encoder,
            records: &records,
            pool: &pool,
            pool_x: &pool_x,
            registry: registry.as_ref(),
            tom: tom.head,
            members: tom.members,
            record_oob: &record_oob,
            tag_calibration,
            cache,
        },
        small,
        progress,
    )
}

/// The sensitive head, with the ToM-lite records that have no sensitive
/// word as its weak negatives; `None` without sensitivity data.
fn train_sensitive_head(
    cfg: &TrainConfig,
    encoder: &Encoder,
    data: &TrainingData,
    small: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<crate::train::sensitive::Trained>, LearnError> {
    let ordinary: Vec<&str> = data
        .train_records
        .iter()
        .map(|r| r.text.as_str())
        .filter(|t| !crate::train::sensitive::may_be_sensitive(t))
        .collect();
    crate::train::sensitive::train_head(
        encoder,
        &data.sensitivity,
        &ordinary,
        // After fine-tuning, only the records the encoder did not see
        // give honest out-of-bag scores for the temperature.
        &|r: &tomlite_models::data::SensitivityRecord| {
            !cfg.tunes_encoder() || is_calibration(&r.id)
        },
        &cfg.sensitivity_files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        small,
        progress,
    )
}

/// Fits the intensity temperature on the bag's out-of-bag logits.
fn calibrate_intensity(
    intensity: &mut Head,
    oob: &[Option<Vec<f32>>],
    honest: &[bool],
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
) {
    let rows = oob_rows(honest, oob);
    let logits: Vec<Vec<f32>> = rows.iter().filter_map(|&i| oob[i].clone()).collect();
    let gold: Vec<usize> = rows.iter().map(|&i| data.train_set.intensity[i]).collect();
    intensity.temperature = fit_temperature_softmax(&logits, &gold);
    progress(&format!(
        "calibration: out-of-bag logits of {} training records ({} members per bag)",
        rows.len(),
        BAG_MEMBERS
    ));
}

/// Fits the affect temperature on records no affect model saw: the
/// calibration slice ([`is_calibration`], also held out of fine-tuning) is
/// left out of a second affect MLP, trained like the first on everything
/// else, and the temperature is fitted on that MLP's logits of the slice's
/// records. The dev split stays out of it (it measures, it does not
/// tune), and so does GoEmotions dev: the temperature is for the records
/// the job annotates, whose labels are far less noisy than GoEmotions'
/// (the argmax, and so GoEmotions macro-F1, does not depend on it).
fn calibrate_affect(
    cfg: &TrainConfig,
    affect: &mut Head,
    data: &TrainingData,
    embedded: &Embedded,
    progress: &mut dyn FnMut(&str),
) -> Result<(), LearnError> {
    let set = &data.train_set;
    let held = |i: usize| is_calibration(&data.train_records[set.group[i]].id);
    let (kept, slice): (Vec<usize>, Vec<usize>) = (0..set.texts.len()).partition(|&i| !held(i));
    // The slice's records themselves (not their quotes).
    let slice: Vec<usize> = slice.into_iter().filter(|&i| set.is_record(i)).collect();
    if slice.is_empty() || kept.is_empty() {
        return Ok(());
    }
    let dim = embedded.tom_train.dim();
    let rows_of = |idx: &[usize]| -> Result<Rows, LearnError> {
        let mut v = Vec::with_capacity(idx.len() * dim);
        for &i in idx {
            v.extend_from_slice(embedded.tom_train.row(i));
        }
        Ok(Rows::new(v, dim)?)
    };
    let mut labels = affect_labels(&data.goemotions.train);
    labels.extend(kept.iter().map(|&i| set.affect[i]));
    let without_slice = affect_mlp(
        cfg,
        &Rows::concat(&[&embedded.goemotions_train, &rows_of(&kept)?])?,
        &labels,
        &mut |_, _| {},
    )?;
    let gold: Vec<usize> = slice.iter().map(|&i| set.affect[i]).collect();
    affect.temperature =
        fit_temperature_softmax(&without_slice.logits_rows(&rows_of(&slice)?)?, &gold);
    progress(&format!(
        "calibration: affect temperature on {} calibration-slice records left out of a second affect model",
        slice.len()
    ));
    Ok(())
}

/// The heads' figures on the dev data, for the card.
struct DevMetrics {
    tom_kind: serde_json::Value,
    affect_goemotions: serde_json::Value,
    affect_tom_lite: serde_json::Value,
    intensity: serde_json::Value,
}

fn dev_metrics(
    tom: &Head,
    affect: &Head,
    intensity: &Head,
    data: &TrainingData,
    (embedded, cued): (&Embedded, &Cued),
    progress: &mut dyn FnMut(&str),
) -> Result<DevMetrics, LearnError> {
    let dev_set = &data.dev_set;
    let dev_x = &embedded.tom_dev;
    let affect_goemotions = single_metrics(
        affect,
        &embedded.goemotions_dev,
        &affect_labels(&data.goemotions.dev),
        &AFFECTS,
    )?;
    let tom_kind = tom_head_metrics(tom, dev_x, &dev_set.kinds)?;
    let intensity = single_metrics(intensity, &cued.tom_dev, &dev_set.intensity, &INTENSITIES)?;
    let affect_tom_lite = single_metrics(affect, dev_x, &dev_set.affect, &AFFECTS)?;
    progress(&format!(
        "dev: tom_kind macro-F1 {:.3} | affect macro-F1 {:.3} (GoEmotions dev), {:.3} (ToM-lite dev) | intensity macro-F1 {:.3}",
        tom_kind["macro_f1"].as_f64().unwrap_or(0.0),
        affect_goemotions["macro_f1"].as_f64().unwrap_or(0.0),
        affect_tom_lite["macro_f1"].as_f64().unwrap_or(0.0),
        intensity["macro_f1"].as_f64().unwrap_or(0.0),
    ));
    Ok(DevMetrics {
        tom_kind,
        affect_goemotions,
        affect_tom_lite,
        intensity,
    })
}

/// What the heads' card is made of.
struct CardInputs<'a> {
    cfg: &'a TrainConfig,
    encoder_sha256: &'a str,
    data: &'a TrainingData,
    tom: &'a Head,
    affect: &'a Head,
    intensity: &'a Head,
    edge_model: &'a crate::train::edges::EdgeModel,
    sensitive: Option<&'a crate::train::sensitive::Trained>,
    dev: DevMetrics,
    finetuned: Option<&'a FineTunedInfo>,
    losses: &'a EpochLosses,
    tag_calibration: &'a TagCalibration,
}

/// The heads' card: their specs, temperatures and figures, the data and
/// the training settings.
fn heads_card(inputs: &CardInputs<'_>) -> Card {
    let head_card = |head: &Head, metrics: serde_json::Value| HeadCard {
        spec: head.spec.clone(),
        temperature: head.temperature,
        metrics,
    };
    let dev = &inputs.dev;
    let edge_model = inputs.edge_model;
    let heads = vec![
        head_card(inputs.tom, dev.tom_kind.clone()),
        head_card(
            inputs.affect,
            json!({"goemotions_dev": dev.affect_goemotions, "tom_lite_dev": dev.affect_tom_lite}),
        ),
        head_card(inputs.intensity, dev.intensity.clone()),
        head_card(&edge_model.person, edge_model.metrics.clone()),
    ]
    .into_iter()
    .chain(
        inputs
            .sensitive
            .map(|t| head_card(&t.head, t.metrics.clone())),
    )
    .collect();
    Card {
        encoder_sha256: inputs.encoder_sha256.to_string(),
        heads,
        training_data: training_data_figures(inputs.cfg, inputs.data),
        training: json!({
            "wording_cues": {"version": tomlite_models::cues::CUES_VERSION, "names": tomlite_models::cues::CUE_NAMES, "heads": ["intensity"]},
            "adapters_sha256": inputs.finetuned.map(|f| f.sha256.clone()),
            "finetune": inputs.finetuned.map(|f| f.summary.clone()),
            "options": inputs.cfg.options,
            "limit": inputs.cfg.limit,
            "final_loss": inputs.losses.iter().rev().map(|(n, e, l)| json!({"head": n, "epoch": e, "loss": l})).take(3).collect::<Vec<_>>(),
        }),
        notes: json!({"command": "tomlite train"}),
        tag_calibration: Some(inputs.tag_calibration.clone()),
        edges: Some(edge_model.calibration.clone()),
    }
}

/// The card's `training_data`: files, split and example counts.
fn training_data_figures(cfg: &TrainConfig, data: &TrainingData) -> serde_json::Value {
    json!({
        "files": data.data_hashes,
        "dev_split": format!("styles {} held out; records without a style: FNV-1a(id) % 100 < 15", HELD_OUT_STYLES.join(", ")),
        "tom_lite_train_records": data.train_records.len(),
        "tom_lite_train_examples": data.train_set.texts.len(),
        "tom_lite_dev_records": data.dev_records.len(),
        "goemotions_train": data.goemotions.train.len(),
        "goemotions_train_cap": cfg.max_goemotions,
        "goemotions_dev": data.goemotions.dev.len(),
        "curated_examples": data.curated.texts.len(),
        "curated_decisions": data.curated.stats,
        "curated_from": cfg.curated.as_ref().map(|p| p.display().to_string()),
    })
}

/// Adds `extra`'s fields to the `figures` of the adapters' card in `dir`.
fn add_card_figures(dir: &Path, extra: serde_json::Value) -> Result<(), LearnError> {
    let path = dir.join(tomlite_models::finetune::ADAPTERS_CARD_FILE);
    let io = |source| LearnError::Card {
        path: path.clone(),
        source,
    };
    let mut card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).map_err(io)?).map_err(|e| io(e.into()))?;
    if let (Some(figures), Some(extra)) = (card["figures"].as_object_mut(), extra.as_object()) {
        figures.extend(extra.clone());
    }
    let mut text = serde_json::to_string_pretty(&card).map_err(|e| io(e.into()))?;
    text.push('\n');
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)
}

fn single_metrics(
    head: &Head,
    x: &Rows,
    gold: &[usize],
    labels: &[&str],
) -> Result<serde_json::Value, LearnError> {
    let logits = head.logits_rows(x)?;
    let probs_at = |t: f64| -> Vec<Vec<f64>> {
        logits
            .iter()
            .map(|z| tomlite_models::metrics::softmax_t(z, t))
            .collect()
    };
    let (p1, pt) = (probs_at(1.0), probs_at(head.temperature));
    let argmax = |p: &Vec<f64>| {
        p.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i)
    };
    let pred: Vec<usize> = pt.iter().map(argmax).collect();
    let (per, macro_f1) = classification_report(labels, gold, &pred);
    let correct: Vec<bool> = pred.iter().zip(gold).map(|(p, g)| p == g).collect();
    let conf = |ps: &[Vec<f64>]| {
        ps.iter()
            .map(|p| p.iter().copied().fold(0.0, f64::max))
            .collect::<Vec<_>>()
    };
    Ok(json!({
        "n": gold.len(),
        "macro_f1": macro_f1,
        "accuracy": correct.iter().filter(|&&c| c).count() as f64 / correct.len().max(1) as f64,
        "ece_before": ece(&conf(&p1), &correct, 15),
        "ece_after": ece(&conf(&pt), &correct, 15),
        "per_label": per,
    }))
}

fn tom_head_metrics(
    head: &Head,
    x: &Rows,
    gold: &[Vec<usize>],
) -> Result<serde_json::Value, LearnError> {
    let logits = head.logits_rows(x)?;
    let at = |t: f64| -> Vec<Vec<f64>> {
        logits
            .iter()
            .map(|z| {
                z.iter()
                    .map(|&v| tomlite_models::metrics::sigmoid_t(v, t))
                    .collect()
            })
            .collect()
    };
    let (p1, pt) = (at(1.0), at(head.temperature));
    let pred: Vec<Vec<usize>> = pt
        .iter()
        .map(|p| (0..p.len()).filter(|&i| p[i] >= 0.5).collect())
        .collect();
    let (per, macro_f1) = multilabel_report(&TOM_KINDS, gold, &pred);
    // Calibration over every (record, kind) decision.
    let flat = |ps: &[Vec<f64>]| -> (Vec<f64>, Vec<bool>) {
        let mut c = Vec::new();
        let mut ok = Vec::new();
        for (p, g) in ps.iter().zip(gold) {
            for (i, &pi) in p.iter().enumerate() {
                let says = pi >= 0.5;
                c.push(if says { pi } else { 1.0 - pi });
                ok.push(says == g.contains(&i));
            }
        }
        (c, ok)
    };
    let (c1, ok1) = flat(&p1);
    let (ct, okt) = flat(&pt);
    Ok(json!({
        "n": gold.len(),
        "macro_f1": macro_f1,
        "ece_before": ece(&c1, &ok1, 15),
        "ece_after": ece(&ct, &okt, 15),
        "per_label": per,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tomlite_models::data::is_dev;

    fn labeled(id: &str, text: &str, kinds: &[&str], quotes: &[&str]) -> LabeledRecord {
        serde_json::from_value(json!({
            "id": id, "text": text,
            "gold": {"tom_kinds": kinds, "affect": "sad", "intensity": "high",
                     "source_quotes": quotes}
        }))
        .expect("labeled record")
    }

    // Fine-tuning examples: records train all three heads and their quotes
    // tom_kind only; the calibration fifth is left out; curated rejections
    // stay a 0 for their kind and unknown (-1) for the others; GoEmotions
    // comments train affect only, as many as asked, drawn by the seed.
    #[test]
    fn finetune_examples_mask_each_source_to_the_heads_it_labels() {
        let ids: Vec<String> = (0..200).map(|i| format!("rec-{i}")).collect();
        let cal = ids.iter().filter(|id| is_calibration(id)).count();
        assert!(cal > 20 && cal < 60, "{cal}");
        let records: Vec<LabeledRecord> = ids
            .iter()
            .map(|id| {
                labeled(
                    id,
                    "I am sad. I want to rest.",
                    &["emotion", "goal"],
                    &["I am sad.", "I want to rest."],
                )
            })
            .collect();
        let tr = tom_set(&records, "x.jsonl", true).unwrap();
        let mut rejected = vec![-1f32; TOM_KINDS.len()];
        rejected[3] = 0.0;
        let cur = CuratedSet {
            texts: vec!["Keep it short.".into()],
            targets: vec![rejected.clone()],
            group: vec![0],
            stats: BTreeMap::new(),
        };
        let goemotions: Vec<AffectExample> = (0..50)
            .map(|i| AffectExample {
                text: format!("comment {i}"),
                affect: if i % 2 == 0 { "happy" } else { "angry" },
            })
            .collect();
        let hashes = BTreeMap::new();
        let data = FineTuneData {
            records: &records,
            tr: &tr,
            cur: &cur,
            goemotions: &goemotions,
            sensitivity: &[],
            data_hashes: &hashes,
        };
        let ex = finetune_examples(&data);
        let kept = 200 - cal;
        let recs: Vec<&Example> = ex.iter().filter(|e| e.intensity.is_some()).collect();
        assert_eq!(recs.len(), kept);
        let goal = TOM_KINDS.iter().position(|k| *k == "goal").unwrap();
        let emotion = TOM_KINDS.iter().position(|k| *k == "emotion").unwrap();
        for e in &recs {
            let t = e.tom_kind.as_ref().unwrap();
            assert_eq!((t[goal], t[emotion]), (1.0, 1.0));
            assert_eq!(e.affect, Some(index_of(&AFFECTS, "sad").unwrap() as u32));
        }
        let sentences: Vec<&Example> = ex
            .iter()
            .filter(|e| e.tom_kind.is_some() && e.intensity.is_none() && e.affect.is_none())
            .collect();
        // Two quotes per kept record, plus the curated one.
        assert_eq!(sentences.len(), 2 * kept + 1);
        let q = sentences
            .iter()
            .find(|e| e.text == "I want to rest.")
            .unwrap();
        let t = q.tom_kind.as_ref().unwrap();
        assert_eq!(t[goal], 1.0);
        assert_eq!(t.iter().sum::<f32>(), 1.0);
        let c = sentences
            .iter()
            .find(|e| e.text == "Keep it short.")
            .unwrap();
        assert_eq!(c.tom_kind.as_ref(), Some(&rejected));
        let ge: Vec<&Example> = ex.iter().filter(|e| e.tom_kind.is_none()).collect();
        assert_eq!(ge.len(), 50);
        assert!(
            ge.iter()
                .all(|e| e.affect.is_some() && e.intensity.is_none())
        );
        assert_eq!(ex, finetune_examples(&data));
    }

    // The dev split holds out whole styles; records without one by id hash.
    #[test]
    fn held_out_split_takes_whole_styles_and_hashes_the_rest() {
        let mut r = labeled("a-1", "x", &[], &[]);
        for (style, held) in [
            ("emoji_social", true),
            ("logistics_admin", true),
            ("bullet_session", false),
        ] {
            r.style = Some(style.into());
            assert_eq!(is_held_out(&r), held, "{style}");
        }
        for i in 0..100 {
            let r = labeled(&format!("id-{i}"), "x", &[], &[]);
            assert_eq!(is_held_out(&r), is_dev(&r.id));
            assert!(!(is_dev(&r.id) && is_calibration(&r.id)));
        }
    }
}
