//! The result of a run ([`FineTuned`]): the adapters and heads, saved
//! beside their card ([`AdapterCard`]) and loaded back.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::checkpoint::{create_dir, read_json, save_tensors, write_json};
use super::{ADAPTERS_CARD_FILE, ADAPTERS_FILE, FineTuneOptions, HeadSpecs};
use crate::Error;
use crate::heads::{Head, HeadSpec};
use crate::lora::{Adapters, LoraConfig, sha256_hex};

/// The result of a run: adapters and heads, and what they came from.
#[derive(Debug, Clone)]
pub struct FineTuned {
    /// The trained adapters.
    pub adapters: Adapters,
    /// tom_kind (temperature 1).
    pub tom_kind: Head,
    /// affect (temperature 1).
    pub affect: Head,
    /// intensity (temperature 1).
    pub intensity: Head,
    /// sensitive content (temperature 1), when the run had the head.
    pub sensitive: Option<Head>,
    /// sha256 of the base weights.
    pub base_sha256: String,
    /// The run's settings.
    pub options: FineTuneOptions,
    /// Mean training loss of each epoch run in this process.
    pub epoch_losses: Vec<f64>,
}

/// The JSON card written beside the adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterCard {
    /// sha256 of the base `model.safetensors` the adapters belong to.
    pub base_sha256: String,
    /// sha256 of `adapters.safetensors` (filled by [`FineTuned::save`]).
    pub adapters_sha256: String,
    /// Rank, alpha, targets.
    pub lora: LoraConfig,
    /// The seed.
    pub seed: u64,
    /// Epochs trained.
    pub epochs: usize,
    /// The heads' shapes.
    pub heads: HeadSpecs,
    /// The run's settings.
    pub training: FineTuneOptions,
    /// Hashes of the training data, as the caller gives them.
    pub data: serde_json::Value,
    /// Figures (metrics, train time), as the caller gives them.
    pub figures: serde_json::Value,
}

impl FineTuned {
    /// The heads' shapes.
    pub fn specs(&self) -> HeadSpecs {
        HeadSpecs {
            tom_kind: self.tom_kind.spec.clone(),
            affect: self.affect.spec.clone(),
            intensity: self.intensity.spec.clone(),
            sensitive: self.sensitive.as_ref().map(|h| h.spec.clone()),
        }
    }

    /// A card for this run with the caller's data hashes and figures.
    pub fn card(&self, data: serde_json::Value, figures: serde_json::Value) -> AdapterCard {
        AdapterCard {
            base_sha256: self.base_sha256.clone(),
            adapters_sha256: String::new(),
            lora: self.adapters.config().clone(),
            seed: self.options.seed,
            epochs: self.options.epochs,
            heads: self.specs(),
            training: self.options.clone(),
            data,
            figures,
        }
    }

    /// Writes `adapters.safetensors` (the adapters and the heads' weights)
    /// and `adapters.json` (the card, with the file's sha256) into `dir`.
    /// Returns the sha256, the adapters' identity.
    pub fn save(&self, dir: &Path, card: &AdapterCard) -> Result<String, Error> {
        create_dir(dir)?;
        let mut ts = self.adapters.tensors()?;
        for h in [&self.tom_kind, &self.affect, &self.intensity]
            .into_iter()
            .chain(&self.sensitive)
        {
            let mut head = HashMap::new();
            h.tensors(&mut head);
            ts.extend(head.into_iter().map(|(k, v)| (format!("head.{k}"), v)));
        }
        let bytes = save_tensors(&ts, &dir.join(ADAPTERS_FILE))?;
        let sha = sha256_hex(&bytes);
        let card = AdapterCard {
            adapters_sha256: sha.clone(),
            ..card.clone()
        };
        write_json(&dir.join(ADAPTERS_CARD_FILE), &card)?;
        Ok(sha)
    }

    /// Reads what [`FineTuned::save`] wrote. Errors when the file's hash is
    /// not the card's.
    pub fn load(dir: &Path) -> Result<(Self, AdapterCard), Error> {
        let card_path = dir.join(ADAPTERS_CARD_FILE);
        let card: AdapterCard = read_json(&card_path)?;
        let file = dir.join(ADAPTERS_FILE);
        let bytes = std::fs::read(&file).map_err(|source| Error::Io {
            op: "read",
            path: file.clone(),
            source,
        })?;
        let sha = sha256_hex(&bytes);
        if sha != card.adapters_sha256 {
            return Err(Error::Adapters {
                path: file,
                message: format!("sha256 {sha} is not the card's {}", card.adapters_sha256),
            });
        }
        let ts = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
            Error::Adapters {
                path: file.clone(),
                message: e.to_string(),
            }
        })?;
        let adapters = Adapters::from_tensors(&ts, &file)?;
        let heads: HashMap<String, Tensor> = ts
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("head.").map(|k| (k.to_string(), v.clone())))
            .collect();
        let head = |spec: &HeadSpec| Head::from_tensors(spec.clone(), 1.0, &heads, &file);
        Ok((
            Self {
                adapters,
                tom_kind: head(&card.heads.tom_kind)?,
                affect: head(&card.heads.affect)?,
                intensity: head(&card.heads.intensity)?,
                sensitive: card.heads.sensitive.as_ref().map(head).transpose()?,
                base_sha256: card.base_sha256.clone(),
                options: card.training.clone(),
                epoch_losses: Vec::new(),
            },
            card,
        ))
    }
}
