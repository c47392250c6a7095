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

//!
//! The steps, one module each: [`config`] (what is asked), `data` (the
//! labeled sets, read and split), `embed_cache` (embeddings, cached),
//! `finetune` (the adapters), `fit` (the heads), `calibrate` (their
//! temperatures) and `card` (what the heads folder says of them); beside
//! them the edge models ([`edges`], and what the curator's edge decisions
//! teach them: `curated_edges`) and their memory-link threshold
//! ([`link_threshold`]), the sensitive head ([`sensitive`]),
//! and `tomlite eval` ([`eval`]).

pub mod bagging;
mod calibrate;
mod card;
pub mod config;
mod curated_edges;
mod data;
pub mod edges;
mod embed_cache;
mod embedding;
pub mod error;
pub mod eval;
mod finetune;
mod fit;
pub mod link_threshold;
pub mod sensitive;
mod sensitive_cache;
pub mod split;
pub mod style_cv;
pub mod trade_off;

use std::collections::BTreeMap;

use serde_json::json;
use tomlite_models::Encoder;
use tomlite_models::finetune::Progress;
use tomlite_models::heads::{Card, Heads, TrainOptions};

use crate::calibrate::{calibrate_affect, calibrate_intensity, calibrate_tom, honest_rows};
use crate::card::{CardInputs, add_card_figures, dev_metrics, heads_card};
pub use crate::config::{CHECKPOINT_DIR, DEFAULT_CURATED_WEIGHT, FineTuneConfig, TrainConfig};
use crate::data::read_training_data;
use crate::embed_cache::embed_sets;
pub use crate::error::LearnError;
pub use crate::eval::{EvalReport, eval_goemotions, eval_records};
use crate::finetune::finetune_or_clear;
use crate::fit::{
    EpochLosses, TomBag, report_epoch_losses, train_affect_head, train_edge_model,
    train_intensity_head, train_sensitive_head, train_tom_head,
};
pub use crate::split::{HELD_OUT_STYLES, is_calibration, is_held_out};

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
    let mut affect = train_affect_head(cfg, &data, &embedded, &mut losses, progress)?;
    let intensity_bag = train_intensity_head(&data, &cued, &small, &mut losses, progress)?;
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
