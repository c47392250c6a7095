//! Low-rank adapters (LoRA) on the encoder's linear layers.
//!
//! A target layer `y = x·Wᵀ + b` (`W` is `(out, in)`) gains two trainable
//! matrices, `A` `(rank, in)` and `B` `(out, rank)`:
//! `y = x·Wᵀ + b + (x·Aᵀ·Bᵀ)·alpha/rank`. `A` starts small and random
//! (uniform in ±1/√in, seeded), `B` at zero, so an untrained adapter leaves
//! the model exactly as it was. After training, `W' = W + (B·A)·alpha/rank`
//! is folded into the base weights ([`Adapters::merge_into`]): the fused f32
//! and int8 inference paths load `W'` as they load `W`, at the same speed.
//!
//! # Targets
//!
//! The default adapts every linear layer of every transformer layer:
//! query, key, value, the attention output dense, and the feed-forward
//! intermediate and output denses ([`LoraTarget::ALL`]). The frozen
//! all-MiniLM-L6-v2 embedding was trained for sentence similarity; what the
//! heads need (feelings, intensity, which of the ToM kinds) is spread over
//! both the attention pattern (which words a sentence attends to) and the
//! feed-forward layers (what a word means in context). Adapting attention
//! alone (the original LoRA recipe) leaves the feed-forward half, two
//! thirds of the weights, as the ceiling; rank 16 on all six costs 663,552
//! parameters (2.7 MB in f32, 3 % of the encoder) on MiniLM-L6, and in the
//! measurements of issue 16 it matched a full fine-tune. The embeddings and layer norms stay
//! frozen. Targets are configurable ([`LoraConfig::targets`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Error;
use crate::bert::Config;
use crate::heads::Rng;

/// A linear layer of a BERT layer that can carry an adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraTarget {
    /// `attention.self.query`.
    Query,
    /// `attention.self.key`.
    Key,
    /// `attention.self.value`.
    Value,
    /// `attention.output.dense`.
    AttentionOutput,
    /// `intermediate.dense` (hidden → intermediate).
    Intermediate,
    /// `output.dense` (intermediate → hidden).
    Output,
}

impl LoraTarget {
    /// Every target, in layer order.
    pub const ALL: [LoraTarget; 6] = [
        Self::Query,
        Self::Key,
        Self::Value,
        Self::AttentionOutput,
        Self::Intermediate,
        Self::Output,
    ];

    /// The layer's name inside `encoder.layer.N`.
    pub fn path(self) -> &'static str {
        match self {
            Self::Query => "attention.self.query",
            Self::Key => "attention.self.key",
            Self::Value => "attention.self.value",
            Self::AttentionOutput => "attention.output.dense",
            Self::Intermediate => "intermediate.dense",
            Self::Output => "output.dense",
        }
    }

    /// `(in, out)` widths of the layer.
    pub fn shape(self, cfg: &Config) -> (usize, usize) {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        match self {
            Self::Intermediate => (h, i),
            Self::Output => (i, h),
            _ => (h, h),
        }
    }

    /// The weight prefix of this target in layer `layer`
    /// (`encoder.layer.3.attention.self.query`).
    pub fn key(self, layer: usize) -> String {
        format!("encoder.layer.{layer}.{}", self.path())
    }
}

/// Rank, scale and targets of the adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Rank of `B·A`.
    pub rank: usize,
    /// Scale numerator: the update is `B·A·alpha/rank`.
    pub alpha: f64,
    /// The adapted layers (in every transformer layer).
    pub targets: Vec<LoraTarget>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            rank: 16,
            alpha: 32.0,
            targets: LoraTarget::ALL.to_vec(),
        }
    }
}

impl LoraConfig {
    /// `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank.max(1) as f64
    }
}

/// The name of the scalar tensor holding `alpha` in an adapters file.
const ALPHA_TENSOR: &str = "lora.alpha";

/// Trained (or freshly initialised) adapters: one `(A, B)` pair per adapted
/// layer, keyed by the layer's weight prefix ([`LoraTarget::key`]).
#[derive(Debug, Clone)]
pub struct Adapters {
    config: LoraConfig,
    pairs: BTreeMap<String, (Var, Var)>,
}

impl Adapters {
    /// New adapters for a model of `cfg`: `A` uniform in ±1/√in from `rng`
    /// (layers in order, targets in [`LoraTarget::ALL`] order), `B` zero.
    pub fn init(cfg: &Config, lora: &LoraConfig, rng: &mut Rng) -> Result<Self, Error> {
        if lora.rank == 0 {
            return Err(Error::InvalidOptions {
                reason: "LoRA rank must be at least 1".into(),
            });
        }
        let mut pairs = BTreeMap::new();
        for layer in 0..cfg.num_hidden_layers {
            for target in LoraTarget::ALL {
                if !lora.targets.contains(&target) {
                    continue;
                }
                let (inp, out) = target.shape(cfg);
                let bound = 1.0 / (inp as f32).sqrt();
                let a: Vec<f32> = (0..lora.rank * inp).map(|_| rng.uniform(bound)).collect();
                let a = Var::from_tensor(&Tensor::from_vec(a, (lora.rank, inp), &Device::Cpu)?)?;
                let b = Var::zeros((out, lora.rank), DType::F32, &Device::Cpu)?;
                pairs.insert(target.key(layer), (a, b));
            }
        }
        Ok(Self {
            config: lora.clone(),
            pairs,
        })
    }

    /// Rank, alpha and targets.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The `(A, B)` pair of a layer (`encoder.layer.N.<target path>`).
    pub fn get(&self, key: &str) -> Option<&(Var, Var)> {
        self.pairs.get(key)
    }

    /// Every `(key, A, B)`, keys in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &Var, &Var)> {
        self.pairs.iter().map(|(k, (a, b))| (k.as_str(), a, b))
    }

    /// Number of trainable values.
    pub fn parameter_count(&self) -> usize {
        self.pairs
            .values()
            .map(|(a, b)| a.elem_count() + b.elem_count())
            .sum()
    }

    /// The tensors as stored: `<key>.lora_a`, `<key>.lora_b` and
    /// `lora.alpha` (a one-element tensor).
    pub fn tensors(&self) -> Result<HashMap<String, Tensor>, Error> {
        let mut out = HashMap::new();
        for (k, (a, b)) in &self.pairs {
            out.insert(format!("{k}.lora_a"), a.as_tensor().clone());
            out.insert(format!("{k}.lora_b"), b.as_tensor().clone());
        }
        out.insert(
            ALPHA_TENSOR.to_string(),
            Tensor::new(&[self.config.alpha as f32], &Device::Cpu)?,
        );
        Ok(out)
    }

    /// Adapters from tensors as [`Adapters::tensors`] writes them (other
    /// tensors are ignored); rank and targets are read from the names and
    /// shapes. `file` names the source in errors.
    pub fn from_tensors(ts: &HashMap<String, Tensor>, file: &Path) -> Result<Self, Error> {
        let bad = |message: String| Error::Adapters {
            path: file.to_path_buf(),
            message,
        };
        let alpha = ts
            .get(ALPHA_TENSOR)
            .ok_or_else(|| bad(format!("tensor {ALPHA_TENSOR} is missing")))?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let [alpha] = alpha[..] else {
            return Err(bad(format!("{ALPHA_TENSOR} must hold one value")));
        };
        let mut pairs = BTreeMap::new();
        let mut targets = Vec::new();
        let mut rank = None;
        for (name, a) in ts {
            let Some(key) = name.strip_suffix(".lora_a") else {
                continue;
            };
            let b = ts
                .get(&format!("{key}.lora_b"))
                .ok_or_else(|| bad(format!("tensor {key}.lora_b is missing")))?;
            let target = LoraTarget::ALL
                .into_iter()
                .find(|t| key.ends_with(&format!(".{}", t.path())))
                .ok_or_else(|| bad(format!("{key} is not an adaptable layer")))?;
            let (r, _) = a.dims2()?;
            let (_, rb) = b.dims2()?;
            if rb != r || rank.is_some_and(|x| x != r) {
                return Err(bad(format!("{key}: adapters of different ranks")));
            }
            rank = Some(r);
            if !targets.contains(&target) {
                targets.push(target);
            }
            pairs.insert(
                key.to_string(),
                (
                    Var::from_tensor(&a.to_dtype(DType::F32)?)?,
                    Var::from_tensor(&b.to_dtype(DType::F32)?)?,
                ),
            );
        }
        let rank = rank.ok_or_else(|| bad("no adapter tensors".into()))?;
        targets.sort();
        Ok(Self {
            config: LoraConfig {
                rank,
                alpha: f64::from(alpha),
                targets,
            },
            pairs,
        })
    }

    /// `W' = W + (B·A)·alpha/rank` for every adapted layer of `weights`
    /// (named as in the checkpoint without prefix: `<key>.weight`). Errors
    /// when a layer is missing or its shape does not fit.
    pub fn merge_into(&self, weights: &mut HashMap<String, Tensor>) -> Result<(), Error> {
        let scale = self.config.scale();
        for (key, (a, b)) in &self.pairs {
            let name = format!("{key}.weight");
            let w = weights.get(&name).ok_or_else(|| Error::InvalidOptions {
                reason: format!("the adapters adapt {name}, which the model does not have"),
            })?;
            let delta = (b.as_tensor().matmul(a.as_tensor())? * scale)?;
            if delta.dims() != w.dims() {
                return Err(Error::InvalidOptions {
                    reason: format!(
                        "adapter of {name} is {:?}, the weight {:?}",
                        delta.dims(),
                        w.dims()
                    ),
                });
            }
            let merged = (w.to_dtype(DType::F32)? + delta)?;
            weights.insert(name, merged);
        }
        Ok(())
    }
}

/// Hex sha256 of bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
