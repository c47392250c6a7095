//! A BERT encoder (embeddings + transformer layers, no pooler) on candle.
//!
//! Follows the shape of candle-transformers' `models/bert.rs`: a serde
//! [`Config`] read from the model's `config.json`, a `load(vb.pp("name"), &cfg)`
//! constructor per block, and [`Module`] where a block maps one tensor to one
//! tensor. It lives here rather than in candle-transformers because the
//! activation ([`Activation`]), the attention softmax ([`attention_softmax`])
//! and the layer norm ([`LayerNorm`]) are meant to be swapped later for faster
//! or trainable versions; each sits behind one small type or function.
//!
//! Tensor names are those of Hugging Face's `BertModel` checkpoints without a
//! prefix (`embeddings.word_embeddings.weight`,
//! `encoder.layer.0.attention.self.query.weight`, …); a checkpoint saved from
//! `BertFor*` models prefixes them with `bert.`, which the caller handles by
//! passing `vb.pp("bert")`.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder, embedding, linear};
use serde::Deserialize;

/// Hidden activation of the feed-forward block (`hidden_act` in `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// Exact GELU, `x * Φ(x)` computed with `erf`: what Hugging Face calls `"gelu"`.
    #[serde(rename = "gelu")]
    GeluErf,
    /// The tanh approximation of GELU (`"gelu_new"`, `"gelu_pytorch_tanh"`).
    #[serde(alias = "gelu_new", rename = "gelu_pytorch_tanh")]
    GeluTanh,
    /// Rectified linear unit (`"relu"`).
    #[serde(rename = "relu")]
    Relu,
}

impl Module for Activation {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Self::GeluErf => xs.gelu_erf(),
            Self::GeluTanh => xs.gelu(),
            Self::Relu => xs.relu(),
        }
    }
}

/// Position embedding kinds; only absolute positions are implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PositionEmbeddingType {
    /// Learned absolute position embeddings.
    #[default]
    Absolute,
}

/// The fields of a Hugging Face BERT `config.json` that the forward pass uses.
///
/// Unknown fields (dropout rates, `architectures`, …) are ignored: dropout
/// does not apply at inference.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Config {
    /// Number of rows of the word embedding table.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads; must divide `hidden_size`.
    pub num_attention_heads: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Feed-forward activation.
    pub hidden_act: Activation,
    /// Number of learned positions, the longest sequence the model takes.
    pub max_position_embeddings: usize,
    /// Number of token type (segment) embeddings.
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    /// Epsilon of every layer norm.
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// Token id used for padding.
    #[serde(default)]
    pub pad_token_id: u32,
    /// Kind of position embedding.
    #[serde(default)]
    pub position_embedding_type: PositionEmbeddingType,
    /// `"bert"` for BERT checkpoints; informational.
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_type_vocab_size() -> usize {
    2
}

fn default_layer_norm_eps() -> f64 {
    1e-12
}

impl Config {
    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }
}

/// Layer normalisation over the last dimension, with weight and bias.
///
/// Loads `weight` and `bias` (Hugging Face's `LayerNorm.weight`/`.bias`).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Loads a layer norm of width `size` from `vb` (`vb.pp("LayerNorm")`).
    pub fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<Self> {
        let weight = vb.get_with_hints(size, "weight", candle_nn::Init::Const(1.0))?;
        let bias = vb.get_with_hints(size, "bias", candle_nn::Init::Const(0.0))?;
        Ok(Self { weight, bias, eps })
    }
}

impl Module for LayerNorm {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        // candle's fused CPU kernel; computes in f32 like PyTorch does for f32.
        candle_nn::ops::layer_norm(&xs.contiguous()?, &self.weight, &self.bias, self.eps as f32)
    }
}

/// Word + position + token type embeddings, then layer norm.
#[derive(Debug, Clone)]
pub struct BertEmbeddings {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    layer_norm: LayerNorm,
}

impl BertEmbeddings {
    /// Loads the embeddings from `vb` (`vb.pp("embeddings")`).
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        Ok(Self {
            word_embeddings: embedding(cfg.vocab_size, cfg.hidden_size, vb.pp("word_embeddings"))?,
            position_embeddings: embedding(
                cfg.max_position_embeddings,
                cfg.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            token_type_embeddings: embedding(
                cfg.type_vocab_size,
                cfg.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            layer_norm: LayerNorm::load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)?,
        })
    }

    /// `input_ids` and `token_type_ids`: `(batch, seq)` u32 → `(batch, seq, hidden)`.
    pub fn forward(&self, input_ids: &Tensor, token_type_ids: &Tensor) -> Result<Tensor> {
        let (_batch, seq_len) = input_ids.dims2()?;
        let words = self.word_embeddings.forward(input_ids)?;
        let types = self.token_type_embeddings.forward(token_type_ids)?;
        let positions = Tensor::arange(0u32, seq_len as u32, input_ids.device())?;
        let positions = self.position_embeddings.forward(&positions)?;
        let xs = (words + types)?.broadcast_add(&positions)?;
        self.layer_norm.forward(&xs)
    }
}

/// Multi-head self-attention (`attention.self`), with the query, key and
/// value projections fused into one `hidden → 3·hidden` matrix product
/// (weights concatenated at load; the bias is added inside the attention
/// kernel).
#[derive(Debug, Clone)]
pub struct BertSelfAttention {
    /// `(hidden, 3·hidden)`: the transposed, concatenated weights.
    qkv_t: Tensor,
    qkv_bias: Tensor,
    num_heads: usize,
    head_dim: usize,
}

impl BertSelfAttention {
    /// Loads `query`, `key`, `value` from `vb` (`vb.pp("self")`) and
    /// concatenates them.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let h = cfg.hidden_size;
        let parts = ["query", "key", "value"]
            .into_iter()
            .map(|name| linear(h, h, vb.pp(name)))
            .collect::<Result<Vec<_>>>()?;
        let weight = Tensor::cat(&parts.iter().map(Linear::weight).collect::<Vec<_>>(), 0)?;
        let bias = Tensor::cat(&parts.iter().map(bias_of).collect::<Result<Vec<_>>>()?, 0)?;
        Ok(Self {
            qkv_t: weight.t()?,
            qkv_bias: bias,
            num_heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `xs`: `(batch·seq, hidden)` for `lengths.len()` texts of `seq`
    /// positions, `lengths[i]` of them real (the rest right padding).
    /// Returns `(batch·seq, hidden)`; padding rows are zero.
    pub fn forward(&self, xs: &Tensor, seq: usize, lengths: &[usize]) -> Result<Tensor> {
        let qkv = xs.matmul(&self.qkv_t)?;
        let (rows, width) = qkv.dims2()?;
        let qkv = qkv.reshape((lengths.len(), seq, width))?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        crate::kernels::attention(&qkv, &self.qkv_bias, lengths, self.num_heads, scale)?
            .reshape((rows, width / 3))
    }
}

/// The bias of a BERT linear layer (every one has one).
fn bias_of(l: &Linear) -> Result<Tensor> {
    l.bias()
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("a BERT linear layer without a bias".into()))
}

/// Dense + bias + residual + layer norm after attention or feed-forward
/// (`attention.output` and `output`), the last three in one kernel.
#[derive(Debug, Clone)]
pub struct BertResidualOutput {
    /// `(in_size, hidden)`: the transposed weight.
    dense_t: Tensor,
    /// `(3, hidden)`: the dense bias, the norm's weight and its bias.
    params: Tensor,
    eps: f32,
}

impl BertResidualOutput {
    /// Loads `dense` (`in_size` → `hidden_size`) and `LayerNorm` from `vb`.
    pub fn load(vb: VarBuilder, in_size: usize, cfg: &Config) -> Result<Self> {
        let dense = linear(in_size, cfg.hidden_size, vb.pp("dense"))?;
        let norm = LayerNorm::load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)?;
        Ok(Self {
            dense_t: dense.weight().t()?,
            params: Tensor::stack(&[bias_of(&dense)?, norm.weight, norm.bias], 0)?,
            eps: cfg.layer_norm_eps as f32,
        })
    }

    /// `layer_norm(xs·Wᵀ + b + residual)`, on `(rows, ·)` matrices.
    pub fn forward(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let xs = xs.matmul(&self.dense_t)?;
        crate::kernels::bias_residual_layer_norm(&xs, residual, &self.params, self.eps)
    }
}

/// Feed-forward expansion with its activation (`intermediate`).
#[derive(Debug, Clone)]
pub struct BertIntermediate {
    /// `(hidden, intermediate)`: the transposed weight.
    dense_t: Tensor,
    bias: Tensor,
    activation: Activation,
}

impl BertIntermediate {
    /// Loads `dense` (`hidden_size` → `intermediate_size`) from `vb`.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let dense = linear(cfg.hidden_size, cfg.intermediate_size, vb.pp("dense"))?;
        Ok(Self {
            dense_t: dense.weight().t()?,
            bias: bias_of(&dense)?,
            activation: cfg.hidden_act,
        })
    }
}

impl Module for BertIntermediate {
    /// `(rows, hidden)` → `(rows, intermediate)`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let xs = xs.matmul(&self.dense_t)?;
        match self.activation {
            Activation::GeluErf => crate::kernels::bias_gelu(&xs, &self.bias),
            other => other.forward(&xs.broadcast_add(&self.bias)?),
        }
    }
}

/// One transformer layer (`encoder.layer.N`).
#[derive(Debug, Clone)]
pub struct BertLayer {
    attention: BertSelfAttention,
    attention_output: BertResidualOutput,
    intermediate: BertIntermediate,
    output: BertResidualOutput,
}

impl BertLayer {
    /// Loads one layer from `vb` (`vb.pp("encoder.layer.N")`).
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        Ok(Self {
            attention: BertSelfAttention::load(vb.pp("attention").pp("self"), cfg)?,
            attention_output: BertResidualOutput::load(
                vb.pp("attention").pp("output"),
                cfg.hidden_size,
                cfg,
            )?,
            intermediate: BertIntermediate::load(vb.pp("intermediate"), cfg)?,
            output: BertResidualOutput::load(vb.pp("output"), cfg.intermediate_size, cfg)?,
        })
    }

    /// `(batch·seq, hidden)` → `(batch·seq, hidden)`; see
    /// [`BertSelfAttention::forward`].
    pub fn forward(&self, xs: &Tensor, seq: usize, lengths: &[usize]) -> Result<Tensor> {
        let attended = self.attention.forward(xs, seq, lengths)?;
        let xs = self.attention_output.forward(&attended, xs)?;
        let expanded = self.intermediate.forward(&xs)?;
        self.output.forward(&expanded, &xs)
    }
}

/// The BERT encoder without its pooler: returns the last hidden states.
#[derive(Debug, Clone)]
pub struct BertModel {
    embeddings: BertEmbeddings,
    layers: Vec<BertLayer>,
    device: Device,
    dtype: DType,
}

impl BertModel {
    /// Loads the model from `vb`, whose root holds `embeddings.*` and `encoder.*`.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            candle_core::bail!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size,
                cfg.num_attention_heads
            );
        }
        let embeddings = BertEmbeddings::load(vb.pp("embeddings"), cfg)?;
        let vb_layers = vb.pp("encoder").pp("layer");
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| BertLayer::load(vb_layers.pp(i.to_string()), cfg))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            embeddings,
            layers,
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Runs the encoder.
    ///
    /// `input_ids`, `token_type_ids`: `(batch, seq)` u32; `attention_mask`:
    /// `(batch, seq)`, 1 for real tokens and 0 for padding (any dtype), or
    /// `None` when nothing is padded. Padding must be on the right (1s then
    /// 0s in every row), as tokenizers pad. Returns `(batch, seq, hidden)`;
    /// the states of padding positions are zero.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        let lengths = match attention_mask {
            Some(mask) => prefix_lengths(mask)?,
            None => vec![t; b],
        };
        self.forward_lengths(input_ids, token_type_ids, &lengths)
    }

    /// Like [`BertModel::forward`] with the mask given as the number of real
    /// tokens of each row.
    pub fn forward_lengths(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        lengths: &[usize],
    ) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        if lengths.len() != b || lengths.iter().any(|&n| n > t) {
            candle_core::bail!(
                "{} lengths for a batch of {b} rows of {t} tokens",
                lengths.len()
            );
        }
        if self.dtype != DType::F32 {
            candle_core::bail!("the encoder runs in f32, not {:?}", self.dtype);
        }
        let hidden = self.embeddings.forward(input_ids, token_type_ids)?;
        let width = hidden.dim(2)?;
        let mut xs = hidden.reshape((b * t, width))?;
        for layer in &self.layers {
            xs = layer.forward(&xs, t, lengths)?;
        }
        let mut xs = xs.reshape((b, t, width))?;
        if lengths.iter().any(|&n| n < t) {
            // Zero the padding rows so that no caller reads stale numbers.
            let keep: Vec<f32> = lengths
                .iter()
                .flat_map(|&n| (0..t).map(move |j| if j < n { 1.0 } else { 0.0 }))
                .collect();
            let keep = Tensor::from_vec(keep, (b, t, 1), &self.device)?;
            xs = xs.broadcast_mul(&keep)?;
        }
        Ok(xs)
    }
}

/// Row lengths of a right-padded `(batch, seq)` 1/0 mask.
fn prefix_lengths(mask: &Tensor) -> Result<Vec<usize>> {
    let rows = mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let n = row.iter().take_while(|&&m| m != 0.0).count();
            if row[n..].iter().any(|&m| m != 0.0) {
                candle_core::bail!("attention_mask row {i} is not right-padded (1s, then 0s)");
            }
            Ok(n)
        })
        .collect()
}
