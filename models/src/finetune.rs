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
//! ([`crate::lora`]) and the heads are [`Var`]s.
//!
//! Every [`Example`] carries an optional target per head, and each head's
//! loss is masked to the examples that have one: a GoEmotions comment trains
//! affect only, a gold quote (a single sentence) trains tom_kind only, a
//! labeled record trains all three. The heads have the shapes of
//! [`crate::heads::Head`] and come back as `Head`s.
//!
//! The optimiser is AdamW with candle's [`ParamsAdamW`] and candle's exact
//! update; it is spelled out here ([`AdamW`]) because `candle_nn::AdamW`
//! keeps its moments and step count private, and a checkpoint must restore
//! them for a resumed run to equal an uninterrupted one. Training is
//! deterministic for a seed: the adapters and heads are initialised from
//! it, and each epoch's batch order is drawn from it.
//!
//! After each epoch a checkpoint (adapters, heads, optimiser moments and
//! step count, the batch-order generator's state, the epoch) is written
//! when [`FineTuneOptions::checkpoint_dir`] is set; with
//! [`FineTuneOptions::resume`] a run starts from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{D, DType, Device, Tensor, Var};
use candle_nn::ParamsAdamW;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::bert::{Activation, Config};
use crate::encoder::{Base, BaseTokenizer, EncodeOptions};
use crate::heads::{Head, HeadSpec, Rng};
use crate::lora::{Adapters, LoraConfig, sha256_hex};

/// File name of the adapters and the fine-tuned heads (one safetensors).
pub const ADAPTERS_FILE: &str = "adapters.safetensors";
/// File name of the adapters' card.
pub const ADAPTERS_CARD_FILE: &str = "adapters.json";
/// File name of the checkpoint's tensors.
pub const CHECKPOINT_FILE: &str = "checkpoint.safetensors";
/// File name of the checkpoint's state.
pub const CHECKPOINT_STATE_FILE: &str = "checkpoint.json";

/// Texts per forward pass when computing base vectors.
const BASE_VECTOR_BATCH: usize = 32;

/// A frozen linear layer: `(out, in)` weight and bias, and its name (the
/// adapter key).
#[derive(Debug, Clone)]
struct Lin {
    key: String,
    weight: Tensor,
    bias: Tensor,
}

impl Lin {
    fn load(weights: &HashMap<String, Tensor>, key: String) -> Result<Self, Error> {
        Ok(Self {
            weight: get(weights, &format!("{key}.weight"))?,
            bias: get(weights, &format!("{key}.bias"))?,
            key,
        })
    }

    /// `x·Wᵀ + b`, plus `(x·Aᵀ·Bᵀ)·scale` when the layer has an adapter.
    fn forward(&self, x: &Tensor, adapters: Option<&Adapters>) -> candle_core::Result<Tensor> {
        let y = x
            .contiguous()?
            .apply_op1(FrozenMatmul(self.weight.clone()))?;
        let y = y.broadcast_add(&self.bias)?;
        match adapters.and_then(|a| a.get(&self.key).map(|p| (a, p))) {
            Some((set, (a, b))) => {
                let low = x.matmul(&a.t()?)?.matmul(&b.t()?)?;
                y + (low * set.config().scale())?
            }
            None => Ok(y),
        }
    }
}

/// `x·Wᵀ` for a frozen `(out, in)` weight `W`, whose backward gives the
/// gradient of `x` only.
///
/// A plain `matmul` also computes the gradient of its right-hand side,
/// frozen or not (candle's backward does not skip untracked operands): one
/// more matrix product per layer and step, and a gradient the size of the
/// whole model kept until the step ends. This op leaves both out.
struct FrozenMatmul(Tensor);

impl candle_core::CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("frozen-matmul needs a contiguous input".into())
        })?;
        let x = Tensor::from_slice(
            &storage.as_slice::<f32>()?[start..end],
            layout.shape(),
            &Device::Cpu,
        )?;
        let y = x.matmul(&self.0.t()?)?;
        let shape = y.shape().clone();
        Ok((
            candle_core::CpuStorage::F32(y.flatten_all()?.to_vec1::<f32>()?),
            shape,
        ))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.0)?))
    }
}

fn get(weights: &HashMap<String, Tensor>, name: &str) -> Result<Tensor, Error> {
    weights
        .get(name)
        .map(|t| t.to_dtype(DType::F32))
        .transpose()?
        .ok_or_else(|| Error::InvalidOptions {
            reason: format!("the model weights have no tensor {name}"),
        })
}

/// Layer norm weight and bias.
#[derive(Debug, Clone)]
struct Norm {
    weight: Tensor,
    bias: Tensor,
}

impl Norm {
    fn load(weights: &HashMap<String, Tensor>, prefix: &str) -> Result<Self, Error> {
        Ok(Self {
            weight: get(weights, &format!("{prefix}.LayerNorm.weight"))?,
            bias: get(weights, &format!("{prefix}.LayerNorm.bias"))?,
        })
    }

    fn forward(&self, x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm_slow(x, &self.weight, &self.bias, eps as f32)
    }
}

#[derive(Debug, Clone)]
struct TrainLayer {
    query: Lin,
    key: Lin,
    value: Lin,
    attention_output: Lin,
    attention_norm: Norm,
    intermediate: Lin,
    output: Lin,
    output_norm: Norm,
}

/// The differentiable forward pass of the BERT encoder, base weights frozen.
#[derive(Debug, Clone)]
pub struct TrainBert {
    config: Config,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    embedding_norm: Norm,
    layers: Vec<TrainLayer>,
}

/// One text's token ids and type ids, special tokens included.
pub type Tokens = (Vec<u32>, Vec<u32>);

/// A padded batch of token ids.
#[derive(Debug, Clone)]
pub struct Batch {
    ids: Tensor,
    type_ids: Tensor,
    /// `(batch, seq)` f32: 1 for real tokens, 0 for padding.
    mask: Tensor,
    lengths: Vec<usize>,
}

impl Batch {
    /// A right-padded batch from token ids and type ids, one row per text
    /// (padding with `pad_id`). Rows must not be empty.
    pub fn new(rows: &[Tokens], pad_id: u32) -> Result<Self, Error> {
        let t = rows.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        if rows.is_empty()
            || rows
                .iter()
                .any(|(ids, types)| ids.is_empty() || ids.len() != types.len())
        {
            return Err(Error::InvalidOptions {
                reason: "a batch needs rows of at least one token, with one type id per token"
                    .into(),
            });
        }
        let b = rows.len();
        let (mut ids, mut types, mut mask) = (
            Vec::with_capacity(b * t),
            Vec::with_capacity(b * t),
            Vec::with_capacity(b * t),
        );
        for (row_ids, row_types) in rows {
            let pad = t - row_ids.len();
            ids.extend(
                row_ids
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(pad_id, pad)),
            );
            types.extend(row_types.iter().copied().chain(std::iter::repeat_n(0, pad)));
            mask.extend(
                std::iter::repeat_n(1f32, row_ids.len()).chain(std::iter::repeat_n(0f32, pad)),
            );
        }
        let d = &Device::Cpu;
        Ok(Self {
            ids: Tensor::from_vec(ids, (b, t), d)?,
            type_ids: Tensor::from_vec(types, (b, t), d)?,
            mask: Tensor::from_vec(mask, (b, t), d)?,
            lengths: rows.iter().map(|(ids, _)| ids.len()).collect(),
        })
    }

    /// Number of texts.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether the batch holds no text (never, for a built batch).
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Real tokens of each text.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }
}

impl TrainBert {
    /// The forward pass over `weights` (named without a `bert.` prefix).
    pub fn from_weights(config: &Config, weights: &HashMap<String, Tensor>) -> Result<Self, Error> {
        if config.hidden_act != Activation::GeluErf {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "training supports the exact GELU activation, not {:?}",
                    config.hidden_act
                ),
            });
        }
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}");
                Ok(TrainLayer {
                    query: Lin::load(weights, format!("{p}.attention.self.query"))?,
                    key: Lin::load(weights, format!("{p}.attention.self.key"))?,
                    value: Lin::load(weights, format!("{p}.attention.self.value"))?,
                    attention_output: Lin::load(weights, format!("{p}.attention.output.dense"))?,
                    attention_norm: Norm::load(weights, &format!("{p}.attention.output"))?,
                    intermediate: Lin::load(weights, format!("{p}.intermediate.dense"))?,
                    output: Lin::load(weights, format!("{p}.output.dense"))?,
                    output_norm: Norm::load(weights, &format!("{p}.output"))?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Self {
            config: config.clone(),
            word: get(weights, "embeddings.word_embeddings.weight")?,
            position: get(weights, "embeddings.position_embeddings.weight")?,
            token_type: get(weights, "embeddings.token_type_embeddings.weight")?,
            embedding_norm: Norm::load(weights, "embeddings")?,
            layers,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Sentence embeddings `(batch, hidden)`: the mean of each text's real
    /// token states, L2-normalised (the encoder's pooling), with the
    /// adapters applied when given.
    pub fn forward(
        &self,
        batch: &Batch,
        adapters: Option<&Adapters>,
    ) -> candle_core::Result<Tensor> {
        let cfg = &self.config;
        let (b, t) = batch.ids.dims2()?;
        let h = cfg.hidden_size;
        let eps = cfg.layer_norm_eps;
        let words = self.word.index_select(&batch.ids.flatten_all()?, 0)?;
        let types = self
            .token_type
            .index_select(&batch.type_ids.flatten_all()?, 0)?;
        let positions = self.position.narrow(0, 0, t)?;
        let x = (words + types)?
            .reshape((b, t, h))?
            .broadcast_add(&positions)?
            .reshape((b * t, h))?;
        let mut x = self.embedding_norm.forward(&x, eps)?;
        // 0 for real keys, a large negative number for padding keys: after
        // the softmax a padding key has weight exactly 0.
        let bias = ((batch.mask.clone() - 1.0)? * 1e9)?.reshape((b, 1, 1, t))?;
        let (nh, hd) = (cfg.num_attention_heads, cfg.head_dim());
        let scale = 1.0 / (hd as f64).sqrt();
        for layer in &self.layers {
            let split = |y: Tensor| -> candle_core::Result<Tensor> {
                y.reshape((b, t, nh, hd))?.transpose(1, 2)?.contiguous()
            };
            let q = split(layer.query.forward(&x, adapters)?)?;
            let k = split(layer.key.forward(&x, adapters)?)?;
            let v = split(layer.value.forward(&x, adapters)?)?;
            // Scaling q (t·hd values) rather than the scores (t·t) keeps one
            // t·t tensor per layer out of the graph.
            let scores = (q * scale)?
                .matmul(&k.t()?.contiguous()?)?
                .broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * t, h))?;
            let attended = layer.attention_output.forward(&context, adapters)?;
            x = layer.attention_norm.forward(&(attended + &x)?, eps)?;
            let expanded = layer.intermediate.forward(&x, adapters)?.gelu_erf()?;
            let out = layer.output.forward(&expanded, adapters)?;
            x = layer.output_norm.forward(&(out + &x)?, eps)?;
        }
        let mask = batch.mask.reshape((b, t, 1))?;
        let summed = x.reshape((b, t, h))?.broadcast_mul(&mask)?.sum(1)?;
        let counts = Tensor::from_vec(
            batch.lengths.iter().map(|&n| n as f32).collect::<Vec<_>>(),
            (b, 1),
            &Device::Cpu,
        )?;
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?;
        mean.broadcast_div(&norm)
    }
}

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

/// A head being trained: the weights of [`Head`] as variables.
#[derive(Debug, Clone)]
pub struct TrainHead {
    spec: HeadSpec,
    w1: Var,
    b1: Var,
    w2: Option<(Var, Var)>,
}

impl TrainHead {
    fn init(spec: &HeadSpec, dim: usize, rng: &mut Rng) -> Result<Self, Error> {
        let out = spec.labels.len();
        let first = if spec.hidden > 0 { spec.hidden } else { out };
        let w1 = crate::heads::init(rng, first, dim)?;
        let b1 = crate::heads::zeros(first)?;
        let w2 = if spec.hidden > 0 {
            Some((
                crate::heads::init(rng, out, spec.hidden)?,
                crate::heads::zeros(out)?,
            ))
        } else {
            None
        };
        Ok(Self {
            spec: spec.clone(),
            w1,
            b1,
            w2,
        })
    }

    /// Logits `(n, labels)` of embeddings `(n, dim)`: the math of
    /// [`Head::logits`].
    pub fn logits(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = x.matmul(&self.w1.t()?)?.broadcast_add(&self.b1)?;
        match &self.w2 {
            Some((w2, b2)) => h.relu()?.matmul(&w2.t()?)?.broadcast_add(b2),
            None => Ok(h),
        }
    }

    /// The trained head (temperature 1).
    pub fn to_head(&self) -> Result<Head, Error> {
        Head::from_weights(
            self.spec.clone(),
            self.w1.as_tensor().copy()?,
            self.b1.as_tensor().copy()?,
            self.w2
                .as_ref()
                .map(|(w, b)| {
                    Ok::<_, candle_core::Error>((w.as_tensor().copy()?, b.as_tensor().copy()?))
                })
                .transpose()?,
            1.0,
        )
    }

    /// `(name, var)` for each weight: `head.<name>.w1`, `.b1`, `.w2`, `.b2`.
    pub fn vars(&self) -> Vec<(String, Var)> {
        let p = format!("head.{}", self.spec.name);
        let mut out = vec![
            (format!("{p}.w1"), self.w1.clone()),
            (format!("{p}.b1"), self.b1.clone()),
        ];
        if let Some((w, b)) = &self.w2 {
            out.push((format!("{p}.w2"), w.clone()));
            out.push((format!("{p}.b2"), b.clone()));
        }
        out
    }
}

/// Everything a run trains: the adapters and the three heads.
#[derive(Debug, Clone)]
pub struct Trainable {
    /// The adapters.
    pub adapters: Adapters,
    /// tom_kind.
    pub tom_kind: TrainHead,
    /// affect.
    pub affect: TrainHead,
    /// intensity.
    pub intensity: TrainHead,
    /// sensitive content, when the run has the head.
    pub sensitive: Option<TrainHead>,
}

impl Trainable {
    /// Every trainable variable with a stable name, in a fixed order:
    /// `lora.<layer key>.a`/`.b`, then the heads' weights.
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (key, a, b) in self.adapters.pairs() {
            out.push((format!("lora.{key}.a"), a.clone()));
            out.push((format!("lora.{key}.b"), b.clone()));
        }
        for h in [&self.tom_kind, &self.affect, &self.intensity]
            .into_iter()
            .chain(&self.sensitive)
        {
            out.extend(h.vars());
        }
        out
    }
}

/// The per-head losses of a batch, and their sum (what is minimised).
#[derive(Debug, Clone)]
pub struct Losses {
    /// tom_kind + affect + intensity + sensitive + similarity × its weight.
    pub total: Tensor,
    /// Masked binary cross-entropy of tom_kind.
    pub tom_kind: Tensor,
    /// Masked, class-weighted cross-entropy of affect.
    pub affect: Tensor,
    /// Masked, class-weighted cross-entropy of intensity.
    pub intensity: Tensor,
    /// Masked, class-weighted cross-entropy of sensitive content (0
    /// without the head).
    pub sensitive: Tensor,
    /// Mean 1 − cos(tuned vector, base vector) over the examples given an
    /// anchor (0 when none is).
    pub similarity: Tensor,
}

/// AdamW with candle's parameters and update rule, its state open for
/// checkpoints: per variable the first and second moments, and the step
/// count.
#[derive(Debug, Clone)]
pub struct AdamW {
    params: ParamsAdamW,
    step: usize,
    moments: Vec<(Tensor, Tensor)>,
}

impl AdamW {
    /// Zero moments for `vars`.
    pub fn new(vars: &[(String, Var)], params: ParamsAdamW) -> Result<Self, Error> {
        let moments = vars
            .iter()
            .map(|(_, v)| Ok((v.zeros_like()?, v.zeros_like()?)))
            .collect::<Result<Vec<_>, candle_core::Error>>()?;
        Ok(Self {
            params,
            step: 0,
            moments,
        })
    }

    /// Steps taken.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// One update of `vars` (the same list, in the same order, as at
    /// [`AdamW::new`]) from `grads`; a variable without a gradient is left
    /// alone, as candle's AdamW does.
    pub fn step(&mut self, vars: &[(String, Var)], grads: &GradStore) -> Result<(), Error> {
        self.step += 1;
        let p = &self.params;
        let (lr, beta1, beta2) = (p.lr, p.beta1, p.beta2);
        let scale_m = 1f64 / (1f64 - beta1.powi(self.step as i32));
        let scale_v = 1f64 / (1f64 - beta2.powi(self.step as i32));
        for ((_, theta), (m, v)) in vars.iter().zip(self.moments.iter_mut()) {
            if let Some(g) = grads.get(theta) {
                let next_m = ((&*m * beta1)? + (g * (1.0 - beta1))?)?;
                let next_v = ((&*v * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
                let m_hat = (&next_m * scale_m)?;
                let v_hat = (&next_v * scale_v)?;
                let next_theta = (theta.as_tensor() * (1f64 - lr * p.weight_decay))?;
                let adjusted = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
                theta.set(&(next_theta - (adjusted * lr)?)?)?;
                *m = next_m;
                *v = next_v;
            }
        }
        Ok(())
    }
}

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

/// The state file of a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointState {
    /// Epochs finished.
    epoch: usize,
    /// Optimiser steps taken.
    step: usize,
    /// The batch-order generator after `epoch` epochs.
    rng_state: u64,
    /// sha256 of the settings (epochs aside), the heads and the examples:
    /// a checkpoint resumes only the run it belongs to.
    fingerprint: String,
    /// Mean loss of each finished epoch.
    epoch_losses: Vec<f64>,
}

/// The encoder's base weights, tokenizer and differentiable forward: what
/// fine-tuning starts from.
pub struct FineTuner {
    model: TrainBert,
    tokenizer: BaseTokenizer,
    sha256: String,
}

impl std::fmt::Debug for FineTuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FineTuner")
            .field("sha256", &self.sha256)
            .field("config", &self.model.config)
            .finish_non_exhaustive()
    }
}

impl FineTuner {
    /// Loads the model directory (`config.json`, `model.safetensors`,
    /// `tokenizer.json`) the encoder loads.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let base = Base::load(dir, EncodeOptions::default())?;
        let model = TrainBert::from_weights(&base.config, &base.weights)?;
        Ok(Self {
            model,
            tokenizer: base.tokenizer,
            sha256: base.sha256,
        })
    }

    /// The differentiable forward pass.
    pub fn model(&self) -> &TrainBert {
        &self.model
    }

    /// sha256 of the base weights.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Token ids and type ids of each text, with special tokens, cut to
    /// `max_tokens` (capped at the model's positions) as the encoder cuts.
    pub fn tokenize(&self, texts: &[&str], max_tokens: usize) -> Result<Vec<Tokens>, Error> {
        use rayon::prelude::*;
        let max = max_tokens.min(self.model.config.max_position_embeddings);
        if max <= self.tokenizer.added_tokens {
            return Err(Error::InvalidOptions {
                reason: format!("max_tokens {max_tokens} leaves no room for the text"),
            });
        }
        texts
            .par_iter()
            .enumerate()
            .map(|(i, t)| {
                let (e, _) = crate::encoder::tokenize(
                    &self.tokenizer.tokenizer,
                    self.tokenizer.added_tokens,
                    max,
                    t,
                    i,
                    false,
                )?;
                Ok((e.get_ids().to_vec(), e.get_type_ids().to_vec()))
            })
            .collect()
    }

    /// A padded batch of `texts`.
    pub fn batch(&self, texts: &[&str], max_tokens: usize) -> Result<Batch, Error> {
        Batch::new(
            &self.tokenize(texts, max_tokens)?,
            self.model.config.pad_token_id,
        )
    }

    /// Fresh adapters and heads for `opts.seed`: the adapters first, then
    /// tom_kind, affect and intensity, from one generator.
    pub fn init(&self, specs: &HeadSpecs, opts: &FineTuneOptions) -> Result<Trainable, Error> {
        let mut rng = Rng::new(opts.seed);
        let dim = self.model.config.hidden_size;
        let adapters = Adapters::init(&self.model.config, &opts.lora, &mut rng)?;
        Ok(Trainable {
            adapters,
            tom_kind: TrainHead::init(&specs.tom_kind, dim, &mut rng)?,
            affect: TrainHead::init(&specs.affect, dim, &mut rng)?,
            intensity: TrainHead::init(&specs.intensity, dim, &mut rng)?,
            sensitive: specs
                .sensitive
                .as_ref()
                .map(|spec| TrainHead::init(spec, dim, &mut rng))
                .transpose()?,
        })
    }

    /// The masked losses of `examples` run as one batch (`batch` built from
    /// their texts). Each head's loss is the mean over the examples (and,
    /// for tom_kind, the kinds) that carry its target, weighted by class for
    /// affect and intensity; a head no example of the batch has a target
    /// for contributes 0, and its weights get a zero gradient.
    ///
    /// `anchors` holds, per example, its base vector ([`FineTuner::base_vectors`])
    /// or `None`; the similarity term is the mean of 1 − cos over the
    /// examples that have one, weighted by `opts.similarity_weight` in the
    /// total.
    pub fn losses(
        &self,
        state: &Trainable,
        batch: &Batch,
        examples: &[&Example],
        anchors: &[Option<&[f32]>],
        opts: &FineTuneOptions,
    ) -> Result<Losses, Error> {
        let n = examples.len();
        if n != batch.len() {
            return Err(Error::InvalidOptions {
                reason: format!("{n} examples for a batch of {}", batch.len()),
            });
        }
        let x = self.model.forward(batch, Some(&state.adapters))?;
        let d = &Device::Cpu;

        // tom_kind: binary cross-entropy per known (example, kind).
        let kinds = state.tom_kind.spec.labels.len();
        let z = state.tom_kind.logits(&x)?;
        let (mut y, mut m) = (Vec::with_capacity(n * kinds), Vec::with_capacity(n * kinds));
        for e in examples {
            match &e.tom_kind {
                Some(t) => {
                    y.extend(t.iter().map(|&v| v.max(0.0)));
                    m.extend(t.iter().map(|&v| if v < 0.0 { 0f32 } else { 1.0 }));
                }
                None => {
                    y.extend(std::iter::repeat_n(0f32, kinds));
                    m.extend(std::iter::repeat_n(0f32, kinds));
                }
            }
        }
        let kept = m.iter().sum::<f32>().max(1.0);
        let y = Tensor::from_vec(y, (n, kinds), d)?;
        let m = Tensor::from_vec(m, (n, kinds), d)?;
        // max(z, 0) - z·y + log(1 + exp(-|z|)), per element.
        let per = ((z.relu()? - (&z * &y)?)? + ((z.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
        let tom_kind = ((per * m)?.sum_all()? / f64::from(kept))?;

        let single = |head: &TrainHead,
                      target: fn(&Example) -> Option<u32>,
                      weights: &[f32]|
         -> Result<Tensor, Error> {
            let z = head.logits(&x)?;
            let mut labels = Vec::with_capacity(n);
            let mut w = Vec::with_capacity(n);
            for e in examples {
                let (l, wi) = match target(e) {
                    Some(l) => (l, weights.get(l as usize).copied().unwrap_or(1.0)),
                    None => (0, 0.0),
                };
                labels.push(l);
                w.push(wi);
            }
            let total: f32 = w.iter().sum();
            let labels = Tensor::from_vec(labels, (n, 1), d)?;
            let w = Tensor::from_vec(w, n, d)?;
            let lp = candle_nn::ops::log_softmax(&z, 1)?;
            let picked = lp.gather(&labels, 1)?.squeeze(1)?;
            let denom = if total > 0.0 { f64::from(total) } else { 1.0 };
            Ok(((picked * w)?.sum_all()?.neg()? / denom)?)
        };
        let affect = single(&state.affect, |e| e.affect, &opts.affect_class_weights)?;
        let intensity = single(
            &state.intensity,
            |e| e.intensity,
            &opts.intensity_class_weights,
        )?;
        let sensitive = match &state.sensitive {
            Some(head) => single(head, |e| e.sensitive, &opts.sensitive_class_weights)?,
            None => Tensor::zeros((), DType::F32, d)?,
        };
        let similarity = self.similarity(&x, anchors)?;
        let total = (((&tom_kind + &affect)? + &intensity)? + &sensitive)?;
        let total = if opts.similarity_weight > 0.0 {
            (total + (&similarity * opts.similarity_weight)?)?
        } else {
            total
        };
        Ok(Losses {
            total,
            tom_kind,
            affect,
            intensity,
            sensitive,
            similarity,
        })
    }

    /// Mean 1 − cos of the rows of `x` (unit vectors) and their anchors,
    /// over the rows that have one.
    fn similarity(&self, x: &Tensor, anchors: &[Option<&[f32]>]) -> Result<Tensor, Error> {
        let (n, dim) = x.dims2()?;
        let kept = anchors.iter().filter(|a| a.is_some()).count();
        if kept == 0 {
            return Ok(Tensor::zeros((), DType::F32, &Device::Cpu)?);
        }
        if anchors.len() != n {
            return Err(Error::InvalidOptions {
                reason: format!("{} anchors for a batch of {n}", anchors.len()),
            });
        }
        let mut a = Vec::with_capacity(n * dim);
        let mut m = Vec::with_capacity(n);
        for anchor in anchors {
            match anchor {
                Some(v) if v.len() == dim => {
                    a.extend_from_slice(v);
                    m.push(1f32);
                }
                Some(v) => {
                    return Err(Error::InvalidOptions {
                        reason: format!("an anchor of {} values for vectors of {dim}", v.len()),
                    });
                }
                None => {
                    a.extend(std::iter::repeat_n(0f32, dim));
                    m.push(0.0);
                }
            }
        }
        let a = Tensor::from_vec(a, (n, dim), &Device::Cpu)?;
        let m = Tensor::from_vec(m, n, &Device::Cpu)?;
        let cos = (x * a)?.sum(1)?;
        let gap = ((cos.neg()? + 1.0)? * m)?.sum_all()?;
        Ok((gap / kept as f64)?)
    }

    /// The base encoder's sentence vectors of `texts` (no adapters, no
    /// gradient), in input order: the anchors of the similarity term.
    pub fn base_vectors(&self, texts: &[&str], max_tokens: usize) -> Result<Vec<Vec<f32>>, Error> {
        let tokens = self.tokenize(texts, max_tokens)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| tokens[i].0.len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BASE_VECTOR_BATCH) {
            let rows: Vec<Tokens> = chunk.iter().map(|&i| tokens[i].clone()).collect();
            let batch = Batch::new(&rows, self.model.config.pad_token_id)?;
            let v = self.model.forward(&batch, None)?.to_vec2::<f32>()?;
            for (&i, row) in chunk.iter().zip(v) {
                out[i] = row;
            }
        }
        Ok(out)
    }

    /// Fine-tunes adapters and heads on `examples`.
    ///
    /// Each epoch draws a batch order from the seed (examples of similar
    /// length batched together, the batches in random order), runs
    /// `ceil(n / batch_size)` AdamW steps, and, with a checkpoint
    /// directory, writes a checkpoint. With `opts.resume` and a checkpoint
    /// there, the run continues after its last finished epoch (an error
    /// when the checkpoint belongs to other settings, heads or examples;
    /// `epochs` may grow). `progress` is called after every step.
    pub fn train(
        &self,
        examples: &[Example],
        specs: &HeadSpecs,
        opts: &FineTuneOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<FineTuned, Error> {
        validate(examples, specs, opts)?;
        let fingerprint = fingerprint(examples, specs, opts)?;
        let tokens = {
            let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
            self.tokenize(&texts, opts.max_tokens)?
        };
        let state = self.init(specs, opts)?;
        let vars = state.vars();
        let params = ParamsAdamW {
            lr: opts.learning_rate,
            weight_decay: opts.weight_decay,
            ..ParamsAdamW::default()
        };
        let mut adam = AdamW::new(&vars, params)?;
        let mut rng = Rng::new(opts.seed ^ 0x5851_F42D_4C95_7F2D);
        let mut first_epoch = 0;
        let mut epoch_losses = Vec::new();
        if let Some(dir) = opts.checkpoint_dir.as_deref().filter(|_| opts.resume)
            && dir.join(CHECKPOINT_STATE_FILE).is_file()
        {
            let cp = load_checkpoint(dir, &vars, &mut adam, &fingerprint)?;
            first_epoch = cp.epoch;
            rng = Rng::new(cp.rng_state);
            epoch_losses = cp.epoch_losses;
        }
        // The similarity term's anchors: base vectors of the examples with
        // a tom_kind target (records and sentences), computed once.
        let anchors: Vec<Option<Vec<f32>>> = if opts.similarity_weight > 0.0 {
            let which: Vec<usize> = (0..examples.len())
                .filter(|&i| examples[i].tom_kind.is_some() || examples[i].sensitive.is_some())
                .collect();
            let texts: Vec<&str> = which.iter().map(|&i| examples[i].text.as_str()).collect();
            let vectors = self.base_vectors(&texts, opts.max_tokens)?;
            let mut out = vec![None; examples.len()];
            for (i, v) in which.into_iter().zip(vectors) {
                out[i] = Some(v);
            }
            out
        } else {
            vec![None; examples.len()]
        };
        // Affect-only examples are drawn afresh each epoch when asked; the
        // others are in every epoch.
        let (kept, pool): (Vec<usize>, Vec<usize>) =
            (0..examples.len()).partition(|&i| !is_affect_only(&examples[i]));
        let drawn = opts
            .affect_only_per_epoch
            .map_or(pool.len(), |k| k.min(pool.len()));
        let n = kept.len() + drawn;
        let per_epoch = n.div_ceil(opts.batch_size);
        let steps = per_epoch * opts.epochs;
        let started = Instant::now();
        let mut seen = 0usize;
        let mut step = adam.step_count();
        let lengths: Vec<usize> = tokens.iter().map(|(ids, _)| ids.len()).collect();
        for epoch in first_epoch..opts.epochs {
            let mut members = kept.clone();
            if drawn < pool.len() {
                let mut pool = pool.clone();
                rng.shuffle(&mut pool);
                members.extend_from_slice(&pool[..drawn]);
            } else {
                members.extend_from_slice(&pool);
            }
            let batches = epoch_batches(&members, &lengths, opts.batch_size, &mut rng);
            let mut sum = 0.0;
            for (i, chunk) in batches.iter().enumerate() {
                let rows: Vec<Tokens> = chunk.iter().map(|&j| tokens[j].clone()).collect();
                let batch = Batch::new(&rows, self.model.config.pad_token_id)?;
                let picked: Vec<&Example> = chunk.iter().map(|&j| &examples[j]).collect();
                let anchored: Vec<Option<&[f32]>> =
                    chunk.iter().map(|&j| anchors[j].as_deref()).collect();
                let losses = self.losses(&state, &batch, &picked, &anchored, opts)?;
                let grads = losses.total.backward()?;
                adam.step(&vars, &grads)?;
                let loss = f64::from(losses.total.to_scalar::<f32>()?);
                sum += loss;
                step += 1;
                seen += chunk.len();
                let rate = seen as f64 / started.elapsed().as_secs_f64().max(1e-9);
                let left = (steps - step.min(steps)) as f64 * opts.batch_size as f64;
                let epoch_done = i + 1 == per_epoch;
                progress(&Progress {
                    epoch: epoch + 1,
                    epochs: opts.epochs,
                    step,
                    steps,
                    loss,
                    epoch_loss: sum / (i + 1) as f64,
                    examples_per_s: rate,
                    eta: Duration::from_secs_f64(left / rate.max(1e-9)),
                    epoch_done,
                });
            }
            epoch_losses.push(sum / per_epoch.max(1) as f64);
            if let Some(dir) = &opts.checkpoint_dir {
                save_checkpoint(
                    dir,
                    &vars,
                    &adam,
                    &CheckpointState {
                        epoch: epoch + 1,
                        step: adam.step_count(),
                        rng_state: rng.state(),
                        fingerprint: fingerprint.clone(),
                        epoch_losses: epoch_losses.clone(),
                    },
                )?;
            }
        }
        Ok(FineTuned {
            adapters: state.adapters.clone(),
            tom_kind: state.tom_kind.to_head()?,
            affect: state.affect.to_head()?,
            intensity: state.intensity.to_head()?,
            sensitive: state
                .sensitive
                .as_ref()
                .map(TrainHead::to_head)
                .transpose()?,
            base_sha256: self.sha256.clone(),
            options: opts.clone(),
            epoch_losses,
        })
    }
}

/// Batches per window of a shuffled epoch: examples whose lengths are
/// close share a batch, so padding is short.
const BUCKET_BATCHES: usize = 32;

/// Whether an example trains affect only (a GoEmotions comment).
fn is_affect_only(e: &Example) -> bool {
    e.tom_kind.is_none() && e.intensity.is_none() && e.sensitive.is_none()
}

/// One epoch's batches of the examples `members` (indices into
/// `lengths`): shuffled, cut into windows of [`BUCKET_BATCHES`] batches,
/// each window sorted by token count (stable) and cut into batches, then
/// the batches shuffled. Every batch but the last of the last window is
/// full, so an epoch has `ceil(members / batch_size)` steps; the order
/// depends on the generator only.
fn epoch_batches(
    members: &[usize],
    lengths: &[usize],
    batch_size: usize,
    rng: &mut Rng,
) -> Vec<Vec<usize>> {
    let mut order = members.to_vec();
    rng.shuffle(&mut order);
    let mut batches: Vec<Vec<usize>> = Vec::with_capacity(order.len().div_ceil(batch_size));
    for window in order.chunks_mut(batch_size * BUCKET_BATCHES) {
        window.sort_by_key(|&i| lengths[i]);
        batches.extend(window.chunks(batch_size).map(<[usize]>::to_vec));
    }
    rng.shuffle(&mut batches);
    batches
}

fn validate(examples: &[Example], specs: &HeadSpecs, opts: &FineTuneOptions) -> Result<(), Error> {
    let bad = |reason: String| Err(Error::InvalidOptions { reason });
    if opts.batch_size == 0 || opts.epochs == 0 {
        return bad("batch_size and epochs must be at least 1".into());
    }
    if examples.is_empty() {
        return bad("no training examples".into());
    }
    if !specs.tom_kind.multi_label || specs.affect.multi_label || specs.intensity.multi_label {
        return bad("tom_kind must be multi-label, affect and intensity single-label".into());
    }
    let kinds = specs.tom_kind.labels.len();
    for (i, e) in examples.iter().enumerate() {
        if let Some(t) = &e.tom_kind
            && (t.len() != kinds || t.iter().any(|&v| !(v == -1.0 || (0.0..=1.0).contains(&v))))
        {
            return bad(format!(
                "example {i}: tom_kind needs {kinds} values of 0..1 or -1, got {t:?}"
            ));
        }
        for (field, v, spec) in [
            ("affect", e.affect, &specs.affect),
            ("intensity", e.intensity, &specs.intensity),
        ] {
            if let Some(v) = v
                && v as usize >= spec.labels.len()
            {
                return bad(format!(
                    "example {i}: {field} label {v} is past the {} labels",
                    spec.labels.len()
                ));
            }
        }
        if let Some(v) = e.sensitive {
            match &specs.sensitive {
                None => {
                    return bad(format!(
                        "example {i}: a sensitive label for a run without a sensitive head"
                    ));
                }
                Some(spec) if v as usize >= spec.labels.len() => {
                    return bad(format!(
                        "example {i}: sensitive label {v} is past the {} labels",
                        spec.labels.len()
                    ));
                }
                Some(_) => {}
            }
        }
    }
    for (field, w, spec) in [
        ("affect", &opts.affect_class_weights, &specs.affect),
        ("intensity", &opts.intensity_class_weights, &specs.intensity),
    ] {
        if !w.is_empty() && w.len() != spec.labels.len() {
            return bad(format!(
                "{field}_class_weights has {} values for {} labels",
                w.len(),
                spec.labels.len()
            ));
        }
    }
    Ok(())
}

/// sha256 over the settings (without `epochs` and the checkpoint fields),
/// the heads and the examples.
fn fingerprint(
    examples: &[Example],
    specs: &HeadSpecs,
    opts: &FineTuneOptions,
) -> Result<String, Error> {
    let settings = FineTuneOptions {
        epochs: 0,
        ..opts.clone()
    };
    let json =
        serde_json::to_vec(&(settings, specs, examples)).map_err(|e| Error::InvalidOptions {
            reason: format!("cannot serialise the run's settings: {e}"),
        })?;
    Ok(sha256_hex(&json))
}

fn save_checkpoint(
    dir: &Path,
    vars: &[(String, Var)],
    adam: &AdamW,
    state: &CheckpointState,
) -> Result<(), Error> {
    create_dir(dir)?;
    let mut ts = HashMap::new();
    for ((name, var), (m, v)) in vars.iter().zip(&adam.moments) {
        ts.insert(format!("param.{name}"), var.as_tensor().clone());
        ts.insert(format!("adam_m.{name}"), m.clone());
        ts.insert(format!("adam_v.{name}"), v.clone());
    }
    // Tensors first, then the state that names their hash: a crash between
    // the two leaves the previous state, which then fails its check rather
    // than resuming from mixed epochs.
    let bytes = save_tensors(&ts, &dir.join(CHECKPOINT_FILE))?;
    let state = CheckpointState {
        fingerprint: format!("{}:{}", state.fingerprint, sha256_hex(&bytes)),
        ..state.clone()
    };
    write_json(&dir.join(CHECKPOINT_STATE_FILE), &state)
}

fn load_checkpoint(
    dir: &Path,
    vars: &[(String, Var)],
    adam: &mut AdamW,
    fingerprint: &str,
) -> Result<CheckpointState, Error> {
    let state_path = dir.join(CHECKPOINT_STATE_FILE);
    let mut state: CheckpointState = read_json(&state_path)?;
    let file = dir.join(CHECKPOINT_FILE);
    let bytes = std::fs::read(&file).map_err(|source| Error::Io {
        op: "read",
        path: file.clone(),
        source,
    })?;
    let bad = |message: String| Error::Adapters {
        path: file.clone(),
        message,
    };
    let expected = format!("{fingerprint}:{}", sha256_hex(&bytes));
    match state.fingerprint.split_once(':') {
        Some((run, _)) if run != fingerprint => {
            return Err(Error::Adapters {
                path: state_path,
                message: "the checkpoint belongs to a run with other settings, heads or examples"
                    .into(),
            });
        }
        _ if state.fingerprint != expected => {
            return Err(bad(
                "the tensors are not the ones the checkpoint state names".into(),
            ));
        }
        _ => {}
    }
    state.fingerprint = fingerprint.to_string();
    let ts = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| bad(e.to_string()))?;
    let take = |name: &str, like: &Tensor| -> Result<Tensor, Error> {
        let t = ts
            .get(name)
            .ok_or_else(|| bad(format!("tensor {name} is missing")))?;
        if t.dims() != like.dims() {
            return Err(bad(format!(
                "tensor {name} is {:?}, not {:?}",
                t.dims(),
                like.dims()
            )));
        }
        Ok(t.clone())
    };
    for ((name, var), (m, v)) in vars.iter().zip(adam.moments.iter_mut()) {
        var.set(&take(&format!("param.{name}"), var.as_tensor())?)?;
        *m = take(&format!("adam_m.{name}"), m)?;
        *v = take(&format!("adam_v.{name}"), v)?;
    }
    adam.step = state.step;
    Ok(state)
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        op: "create",
        path: dir.to_path_buf(),
        source,
    })
}

/// Saves tensors as safetensors to a temporary file beside `path`, renames
/// it over `path`, and returns the bytes written.
fn save_tensors(ts: &HashMap<String, Tensor>, path: &Path) -> Result<Vec<u8>, Error> {
    let tmp = path.with_extension("tmp");
    candle_core::safetensors::save(ts, &tmp).map_err(|e| Error::Adapters {
        path: tmp.clone(),
        message: e.to_string(),
    })?;
    let bytes = std::fs::read(&tmp).map_err(|source| Error::Io {
        op: "read",
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        op: "rename",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(bytes)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|source| Error::Io {
        op: "write",
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        op: "rename",
        path: path.to_path_buf(),
        source,
    })
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let mut json = serde_json::to_string_pretty(value).map_err(|e| Error::Adapters {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    json.push('\n');
    write_atomic(path, json.as_bytes())
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Adapters {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bucketing by length must still visit every example once per epoch,
    // in full batches, in an order fixed by the seed.
    #[test]
    fn epoch_batches_cover_every_example_once_in_full_batches_of_similar_length() {
        let lengths: Vec<usize> = (0..1000).map(|i| (i * 7919) % 97 + 3).collect();
        let all: Vec<usize> = (0..1000).collect();
        let batches = epoch_batches(&all, &lengths, 16, &mut Rng::new(3));
        assert_eq!(batches.len(), 1000usize.div_ceil(16));
        assert_eq!(batches.iter().filter(|b| b.len() != 16).count(), 1);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        let padding = |bs: &[Vec<usize>]| -> usize {
            bs.iter()
                .map(|b| {
                    let max = b.iter().map(|&i| lengths[i]).max().unwrap_or(0);
                    b.iter().map(|&i| max - lengths[i]).sum::<usize>()
                })
                .sum()
        };
        let mut order: Vec<usize> = (0..1000).collect();
        Rng::new(3).shuffle(&mut order);
        let plain: Vec<Vec<usize>> = order.chunks(16).map(<[usize]>::to_vec).collect();
        assert!(padding(&batches) * 4 < padding(&plain));
        assert_eq!(batches, epoch_batches(&all, &lengths, 16, &mut Rng::new(3)));
        assert_ne!(batches, epoch_batches(&all, &lengths, 16, &mut Rng::new(4)));
        // A subset: each member once, nothing else.
        let odd: Vec<usize> = (0..1000).filter(|i| i % 2 == 1).collect();
        let mut seen: Vec<usize> = epoch_batches(&odd, &lengths, 16, &mut Rng::new(3))
            .into_iter()
            .flatten()
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, odd);
    }
}
