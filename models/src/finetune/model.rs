//! The differentiable forward pass of the encoder ([`TrainBert`]): frozen
//! base weights, LoRA adapters on the attention and feed-forward
//! projections, and the padded token batches it reads ([`Batch`]).

use std::collections::HashMap;

use candle_core::{D, DType, Device, Tensor};

use crate::Error;
use crate::bert::{Activation, Config};
use crate::lora::Adapters;

/// A frozen linear layer: `(out, in)` weight and bias, and its name (the
/// adapter key).
#[derive(Debug, Clone)]
pub(super) struct Lin {
    pub(super) key: String,
    pub(super) weight: Tensor,
    pub(super) bias: Tensor,
}

impl Lin {
    pub(super) fn load(weights: &HashMap<String, Tensor>, key: String) -> Result<Self, Error> {
        Ok(Self {
            weight: get(weights, &format!("{key}.weight"))?,
            bias: get(weights, &format!("{key}.bias"))?,
            key,
        })
    }

    /// `x·Wᵀ + b`, plus `(x·Aᵀ·Bᵀ)·scale` when the layer has an adapter.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        adapters: Option<&Adapters>,
    ) -> candle_core::Result<Tensor> {
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
pub(super) struct FrozenMatmul(Tensor);

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

pub(super) fn get(weights: &HashMap<String, Tensor>, name: &str) -> Result<Tensor, Error> {
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
pub(super) struct Norm {
    pub(super) weight: Tensor,
    pub(super) bias: Tensor,
}

impl Norm {
    pub(super) fn load(weights: &HashMap<String, Tensor>, prefix: &str) -> Result<Self, Error> {
        Ok(Self {
            weight: get(weights, &format!("{prefix}.LayerNorm.weight"))?,
            bias: get(weights, &format!("{prefix}.LayerNorm.bias"))?,
        })
    }

    pub(super) fn forward(&self, x: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
        candle_nn::ops::layer_norm_slow(x, &self.weight, &self.bias, eps as f32)
    }
}

#[derive(Debug, Clone)]
pub(super) struct TrainLayer {
    pub(super) query: Lin,
    pub(super) key: Lin,
    pub(super) value: Lin,
    pub(super) attention_output: Lin,
    pub(super) attention_norm: Norm,
    pub(super) intermediate: Lin,
    pub(super) output: Lin,
    pub(super) output_norm: Norm,
}

/// The differentiable forward pass of the BERT encoder, base weights frozen.
#[derive(Debug, Clone)]
pub struct TrainBert {
    pub(super) config: Config,
    pub(super) word: Tensor,
    pub(super) position: Tensor,
    pub(super) token_type: Tensor,
    pub(super) embedding_norm: Norm,
    pub(super) layers: Vec<TrainLayer>,
}

/// One text's token ids and type ids, special tokens included.
pub type Tokens = (Vec<u32>, Vec<u32>);

/// A padded batch of token ids.
#[derive(Debug, Clone)]
pub struct Batch {
    pub(super) ids: Tensor,
    pub(super) type_ids: Tensor,
    /// `(batch, seq)` f32: 1 for real tokens, 0 for padding.
    pub(super) mask: Tensor,
    pub(super) lengths: Vec<usize>,
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
