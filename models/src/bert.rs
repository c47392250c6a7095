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

/// Softmax over the last dimension of the attention scores.
pub fn attention_softmax(scores: &Tensor) -> Result<Tensor> {
    candle_nn::ops::softmax_last_dim(scores)
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

/// Multi-head self-attention (`attention.self`).
#[derive(Debug, Clone)]
pub struct BertSelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    num_heads: usize,
    head_dim: usize,
}

impl BertSelfAttention {
    /// Loads `query`, `key`, `value` from `vb` (`vb.pp("self")`).
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            query: linear(h, h, vb.pp("query"))?,
            key: linear(h, h, vb.pp("key"))?,
            value: linear(h, h, vb.pp("value"))?,
            num_heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `(batch, seq, heads * head_dim)` → `(batch, heads, seq, head_dim)`.
    fn split_heads(&self, xs: &Tensor) -> Result<Tensor> {
        let (b, t, _) = xs.dims3()?;
        xs.reshape((b, t, self.num_heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// `mask` is additive, `(batch, 1, 1, seq)`: 0 for real tokens, a large
    /// negative number for padding.
    pub fn forward(&self, xs: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, hidden) = xs.dims3()?;
        let q = self.split_heads(&self.query.forward(xs)?)?;
        let k = self.split_heads(&self.key.forward(xs)?)?;
        let v = self.split_heads(&self.value.forward(xs)?)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(mask)?;
        let probs = attention_softmax(&scores)?;
        probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, hidden))
    }
}

/// Dense + residual + layer norm after attention or feed-forward
/// (`attention.output` and `output`).
#[derive(Debug, Clone)]
pub struct BertResidualOutput {
    dense: Linear,
    layer_norm: LayerNorm,
}

impl BertResidualOutput {
    /// Loads `dense` (`in_size` → `hidden_size`) and `LayerNorm` from `vb`.
    pub fn load(vb: VarBuilder, in_size: usize, cfg: &Config) -> Result<Self> {
        Ok(Self {
            dense: linear(in_size, cfg.hidden_size, vb.pp("dense"))?,
            layer_norm: LayerNorm::load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)?,
        })
    }

    /// `layer_norm(dense(xs) + residual)`.
    pub fn forward(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let xs = self.dense.forward(xs)?;
        self.layer_norm.forward(&(xs + residual)?)
    }
}

/// Feed-forward expansion with its activation (`intermediate`).
#[derive(Debug, Clone)]
pub struct BertIntermediate {
    dense: Linear,
    activation: Activation,
}

impl BertIntermediate {
    /// Loads `dense` (`hidden_size` → `intermediate_size`) from `vb`.
    pub fn load(vb: VarBuilder, cfg: &Config) -> Result<Self> {
        Ok(Self {
            dense: linear(cfg.hidden_size, cfg.intermediate_size, vb.pp("dense"))?,
            activation: cfg.hidden_act,
        })
    }
}

impl Module for BertIntermediate {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.activation.forward(&self.dense.forward(xs)?)
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

    /// `(batch, seq, hidden)` → `(batch, seq, hidden)`.
    pub fn forward(&self, xs: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let attended = self.attention.forward(xs, mask)?;
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
    /// `None` when nothing is padded. Returns `(batch, seq, hidden)`.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t) = input_ids.dims2()?;
        let mask = match attention_mask {
            Some(mask) => additive_mask(mask, self.dtype)?,
            None => Tensor::zeros((b, 1, 1, t), self.dtype, &self.device)?,
        };
        let mut xs = self.embeddings.forward(input_ids, token_type_ids)?;
        for layer in &self.layers {
            xs = layer.forward(&xs, &mask)?;
        }
        Ok(xs)
    }
}

/// `(batch, seq)` 1/0 mask → `(batch, 1, 1, seq)` additive mask: 0 where the
/// mask is 1, the dtype's minimum where it is 0 (as Hugging Face does).
fn additive_mask(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let (b, t) = mask.dims2()?;
    let min = match dtype {
        DType::F64 => f64::MIN,
        DType::F16 => -65504.0,
        _ => f64::from(f32::MIN),
    };
    let inverted = (1.0 - mask.to_dtype(dtype)?)?;
    (inverted * min)?.reshape((b, 1, 1, t))
}
