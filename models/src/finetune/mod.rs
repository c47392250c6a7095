//! Fine-tuning the encoder with LoRA adapters and the three heads, jointly,
//! on the CPU.
//!
//! The inference model ([`crate::bert`]) runs fused, in-place kernels that
//! record no gradient. Training runs its own forward pass ([`TrainBert`])
//! of the same BERT from plain candle ops, all differentiable: matrix
//! products, `layer_norm_slow` (candle's fused layer norm has no backward),
//! a softmax built from `exp`/`sum`, GELU with `erf`, an additive padding
//! mask in attention, and masked mean pooling plus L2 normalisation exactly
//! as [`crate::Encoder`] pools. It loads the same `model.safetensors`; the
//! base weights are plain tensors (frozen), only the adapters
//! ([`crate::lora`]) and the heads are [`Var`](candle_core::Var)s.
//!
//! Every [`Example`] carries an optional target per head, and each head's
//! loss is masked to the examples that have one: a GoEmotions comment trains
//! affect only, a gold quote (a single sentence) trains tom_kind only, a
//! labeled record trains all three. The heads have the shapes of
//! [`crate::heads::Head`] and come back as `Head`s.
//!
//! The optimiser is AdamW with candle's
//! [`ParamsAdamW`](candle_nn::ParamsAdamW) and candle's exact update; it
//! is spelled out here ([`AdamW`]) because `candle_nn::AdamW` keeps its
//! moments and step count private, and a checkpoint must restore them for
//! a resumed run to equal an uninterrupted one. Training is deterministic
//! for a seed: the adapters and heads are initialised from it, and each
//! epoch's batch order is drawn from it.
//!
//! After each epoch a checkpoint (adapters, heads, optimiser moments and
//! step count, the batch-order generator's state, the epoch) is written
//! when [`FineTuneOptions::checkpoint_dir`] is set; with
//! [`FineTuneOptions::resume`] a run starts from it.
//!
//! One concern per module: `model` (the differentiable forward pass and
//! its token batches), `heads` (the heads being trained and every
//! variable), `optim` (the losses and AdamW), `examples` (checks and each
//! epoch's batches), `tuner` ([`FineTuner`]: the losses of a batch and the
//! training loop), `adapters` ([`FineTuned`]: saved and loaded with their
//! card) and `checkpoint` (each epoch's checkpoint, atomic writes).

mod adapters;
mod checkpoint;
mod examples;
mod heads;
mod model;
mod optim;
mod tuner;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::heads::HeadSpec;
use crate::lora::LoraConfig;

pub use adapters::{AdapterCard, FineTuned};
pub use heads::{TrainHead, Trainable};
pub use model::{Batch, Tokens, TrainBert};
pub use optim::{AdamW, Losses};
pub use tuner::FineTuner;

/// File name of the adapters and the fine-tuned heads (one safetensors).
pub const ADAPTERS_FILE: &str = "adapters.safetensors";

/// File name of the adapters' card.
pub const ADAPTERS_CARD_FILE: &str = "adapters.json";

/// File name of the checkpoint's tensors.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// File name of the checkpoint's state.
pub const CHECKPOINT_STATE_FILE: &str = "checkpoint.json";

/// One training example: a text and, per head, a target or `None` (that
/// head's loss leaves the example out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// The text (a record, a sentence, a comment).
    pub text: String,
    /// tom_kind: one value per kind, 1 (has it), 0 (has not) or -1
    /// (unknown: left out of the loss, as for a curator's rejection).
    pub tom_kind: Option<Vec<f32>>,
    /// affect: the label index.
    pub affect: Option<u32>,
    /// intensity: the label index.
    pub intensity: Option<u32>,
    /// sensitive content: the label index (`none` first), for runs with a
    /// sensitive head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<u32>,
}

impl Example {
    /// A labeled record: trains all three heads.
    pub fn record(text: impl Into<String>, kinds: Vec<f32>, affect: u32, intensity: u32) -> Self {
        Self {
            text: text.into(),
            tom_kind: Some(kinds),
            affect: Some(affect),
            intensity: Some(intensity),
            sensitive: None,
        }
    }

    /// A sentence (a gold quote): trains tom_kind only.
    pub fn sentence(text: impl Into<String>, kinds: Vec<f32>) -> Self {
        Self {
            text: text.into(),
            tom_kind: Some(kinds),
            affect: None,
            intensity: None,
            sensitive: None,
        }
    }

    /// An affect-only example (a GoEmotions comment): trains affect only.
    pub fn affect_only(text: impl Into<String>, affect: u32) -> Self {
        Self {
            text: text.into(),
            tom_kind: None,
            affect: Some(affect),
            intensity: None,
            sensitive: None,
        }
    }

    /// A record or sentence labeled for sensitive content only.
    pub fn sensitive_only(text: impl Into<String>, label: u32) -> Self {
        Self {
            text: text.into(),
            tom_kind: None,
            affect: None,
            intensity: None,
            sensitive: Some(label),
        }
    }
}

/// The shapes of the three heads trained with the adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadSpecs {
    /// Multi-label (one sigmoid per kind).
    pub tom_kind: HeadSpec,
    /// Softmax.
    pub affect: HeadSpec,
    /// Softmax.
    pub intensity: HeadSpec,
    /// Softmax over `none` and the sensitive categories (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<HeadSpec>,
}

/// Settings of a fine-tuning run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FineTuneOptions {
    /// Adapter rank, alpha and targets.
    pub lora: LoraConfig,
    /// Passes over the examples (the total, when resuming).
    pub epochs: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// AdamW learning rate (adapters and heads).
    pub learning_rate: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Seed of the initialisation and of the batch order.
    pub seed: u64,
    /// Longest sequence in training, special tokens included (capped at
    /// the model's positions); longer texts keep their first tokens.
    pub max_tokens: usize,
    /// Loss weight of each affect label (empty: all 1).
    #[serde(default)]
    pub affect_class_weights: Vec<f32>,
    /// Loss weight of each intensity label (empty: all 1).
    #[serde(default)]
    pub intensity_class_weights: Vec<f32>,
    /// Loss weight of each sensitive label (empty: all 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitive_class_weights: Vec<f32>,
    /// Weight of the similarity term: the mean, over the examples with a
    /// tom_kind target (records and their sentences), of 1 − cos(tuned
    /// vector, base vector). It keeps the tuned sentence vectors near the
    /// base encoder's, which memory links rank earlier memories by; 0
    /// leaves the vectors free (they drift to a median cosine of 0.26 in
    /// four epochs, and the right memory is nearest for 8 of 90 links
    /// instead of 58).
    #[serde(default)]
    pub similarity_weight: f64,
    /// Affect-only examples (GoEmotions comments) used per epoch: each
    /// epoch draws this many afresh from all of them (seeded); `None`: all
    /// of them every epoch.
    #[serde(default)]
    pub affect_only_per_epoch: Option<usize>,
    /// Where a checkpoint is written after each epoch (none: no checkpoint).
    #[serde(skip)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Start from the checkpoint in `checkpoint_dir` when there is one.
    #[serde(skip)]
    pub resume: bool,
}

impl Default for FineTuneOptions {
    fn default() -> Self {
        Self {
            lora: LoraConfig::default(),
            epochs: 6,
            batch_size: 16,
            learning_rate: 5e-4,
            weight_decay: 0.01,
            seed: 17,
            max_tokens: 128,
            affect_class_weights: Vec::new(),
            intensity_class_weights: Vec::new(),
            sensitive_class_weights: Vec::new(),
            similarity_weight: 1.0,
            affect_only_per_epoch: None,
            checkpoint_dir: None,
            resume: false,
        }
    }
}

/// Where a run stands, given to the progress callback after every step.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Current epoch, from 1.
    pub epoch: usize,
    /// Epochs of the run.
    pub epochs: usize,
    /// Steps done, over the whole run (resumed epochs included), from 1.
    pub step: usize,
    /// Steps of the whole run.
    pub steps: usize,
    /// Loss of this step.
    pub loss: f64,
    /// Mean loss of this epoch so far.
    pub epoch_loss: f64,
    /// Training examples per second in this process.
    pub examples_per_s: f64,
    /// Estimated time to the end of the run.
    pub eta: Duration,
    /// Whether this step ended its epoch (a checkpoint follows).
    pub epoch_done: bool,
}
