//! The heads' card: their specs, temperatures and dev figures, the data
//! files' hashes and the training settings; and the dev figures added to
//! the adapters' card.

use std::path::Path;

use serde_json::json;
use tomlite_models::Rows;
use tomlite_models::heads::{Card, Head, HeadCard};
use tomlite_models::metrics::{TagCalibration, classification_report, ece, multilabel_report};

use crate::config::TrainConfig;
use crate::curated_edges::CuratedEdgeUse;
use crate::data::{TrainingData, affect_labels};
use crate::edges::EdgeModel;
use crate::embed_cache::{Cued, Embedded};
use crate::error::LearnError;
use crate::finetune::FineTunedInfo;
use crate::fit::EpochLosses;
use crate::sensitive::Trained;
use crate::split::HELD_OUT_STYLES;
use tomlite_core::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// The heads' figures on the dev data, for the card.
pub(super) struct DevMetrics {
    pub(super) tom_kind: serde_json::Value,
    pub(super) affect_goemotions: serde_json::Value,
    pub(super) affect_tom_lite: serde_json::Value,
    pub(super) intensity: serde_json::Value,
}

pub(super) fn dev_metrics(
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
pub(super) struct CardInputs<'a> {
    pub(super) cfg: &'a TrainConfig,
    pub(super) encoder_sha256: &'a str,
    pub(super) data: &'a TrainingData,
    pub(super) tom: &'a Head,
    pub(super) affect: &'a Head,
    pub(super) intensity: &'a Head,
    pub(super) edge_model: &'a EdgeModel,
    pub(super) sensitive: Option<&'a Trained>,
    pub(super) dev: DevMetrics,
    pub(super) finetuned: Option<&'a FineTunedInfo>,
    pub(super) losses: &'a EpochLosses,
    pub(super) tag_calibration: &'a TagCalibration,
}

/// The heads' card: their specs, temperatures and figures, the data and
/// the training settings.
pub(super) fn heads_card(inputs: &CardInputs<'_>) -> Card {
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
        training_data: training_data_figures(inputs.cfg, inputs.data, &edge_model.curated),
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
pub(super) fn training_data_figures(
    cfg: &TrainConfig,
    data: &TrainingData,
    edges: &CuratedEdgeUse,
) -> serde_json::Value {
    let mut decisions = data.curated.stats.clone();
    if edges.decisions > 0 {
        decisions.insert("edges", edges.decisions);
        decisions.insert("edges_not_used", edges.not_used.values().sum());
    }
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
        "curated_weight": data.curated_weight,
        "curated_examples_per_head": {
            "tom_kind": data.curated.texts.len(),
            "affect": data.curated_labels.affect.len(),
            "intensity": data.curated_labels.intensity.len(),
            "edges": {"relation": edges.relation, "registry_link": edges.registry_link, "person": edges.person},
        },
        "curated_edges_not_used": edges.not_used,
        "curated_not_usable_per_head": data.curated_labels.not_usable,
        "curated_decisions": decisions,
        "curated_from": cfg.curated.as_ref().map(|p| p.display().to_string()),
    })
}

/// Adds `extra`'s fields to the `figures` of the adapters' card in `dir`.
pub(super) fn add_card_figures(dir: &Path, extra: serde_json::Value) -> Result<(), LearnError> {
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

pub(super) fn single_metrics(
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

pub(super) fn tom_head_metrics(
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
