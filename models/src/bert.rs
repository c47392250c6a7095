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

/// Numeric precision of the encoder's matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// f32 weights and activations (candle's `gemm`).
    #[default]
    F32,
    /// int8 weights per output channel, integer activations per token, exact
    /// i32 accumulation ([`crate::quant`]); everything between the matrix
    /// products stays f32.
    Int8,
}

impl Precision {
    /// The name used on the command line and in receipts.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "f32" => Ok(Self::F32),
            "int8" => Ok(Self::Int8),
            other => Err(format!(
                "unknown precision `{other}` (expected f32 or int8)"
            )),
        }
    }
}

/// The matrix product of a linear layer, without its bias (the fused
/// kernels add it): f32 or int8.
#[derive(Debug, Clone)]
pub enum Dense {
    /// `(in, out)`: the transposed f32 weight, for `xs.matmul`.
    F32(Tensor),
    /// The int8 layer.
    Int8(crate::quant::QuantLinear),
    /// The f32 layer on the `amx` kernel path ([`crate::amx`]), with the
    /// transposed weight kept for the other paths.
    Amx(crate::amx::Bf16x3Linear, Tensor),
}

impl Dense {
    /// From a Hugging Face `(out, in)` weight.
    fn new(weight: &Tensor, precision: Precision) -> Result<Self> {
        Ok(match precision {
            Precision::F32 => Self::F32(weight.t()?),
            Precision::Int8 => Self::Int8(crate::quant::QuantLinear::quantize(weight)?),
        })
    }

    /// Runs the product on kernel path `kernels`: int8 products on its
    /// instructions; f32 products on the tile unit for `amx` and in `gemm`
    /// (which chooses its own) otherwise.
    fn set_kernels(&mut self, kernels: crate::simd::Kernels) -> Result<()> {
        let amx = kernels.path() == crate::simd::Path::Amx;
        *self = match &*self {
            Self::Int8(layer) => Self::Int8(layer.clone().with_kernels(kernels)),
            Self::F32(weight_t) if amx => Self::Amx(
                crate::amx::Bf16x3Linear::pack(&weight_t.t()?.contiguous()?, kernels)?,
                weight_t.clone(),
            ),
            Self::Amx(_, weight_t) if !amx => Self::F32(weight_t.clone()),
            _ => return Ok(()),
        };
        Ok(())
    }

    /// `(rows, in)` → `(rows, out)`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Self::F32(weight_t) => xs.matmul(weight_t),
            Self::Int8(layer) => layer.forward(xs),
            Self::Amx(layer, _) => layer.forward(xs),
        }
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

    /// Packed rows: `input_ids`, `token_type_ids` and `positions` are
    /// `(rows,)` u32 (each token's position inside its own text) →
    /// `(rows, hidden)`.
    pub fn forward_packed(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        positions: &Tensor,
    ) -> Result<Tensor> {
        let words = self.word_embeddings.forward(input_ids)?;
        let types = self.token_type_embeddings.forward(token_type_ids)?;
        let positions = self.position_embeddings.forward(positions)?;
        self.layer_norm.forward(&((words + types)? + positions)?)
    }
}

/// Multi-head self-attention (`attention.self`), with the query, key and
/// value projections fused into one `hidden → 3·hidden` matrix product
/// (weights concatenated at load; the bias is added inside the attention
/// kernel).
#[derive(Debug, Clone)]
pub struct BertSelfAttention {
    /// `hidden → 3·hidden`: the concatenated weights.
    qkv: Dense,
    qkv_bias: Tensor,
    num_heads: usize,
    head_dim: usize,
}

impl BertSelfAttention {
    /// Loads `query`, `key`, `value` from `vb` (`vb.pp("self")`) and
    /// concatenates them.
    pub fn load(vb: VarBuilder, cfg: &Config, precision: Precision) -> Result<Self> {
        let h = cfg.hidden_size;
        let parts = ["query", "key", "value"]
            .into_iter()
            .map(|name| linear(h, h, vb.pp(name)))
            .collect::<Result<Vec<_>>>()?;
        let weight = Tensor::cat(&parts.iter().map(Linear::weight).collect::<Vec<_>>(), 0)?;
        let bias = Tensor::cat(&parts.iter().map(bias_of).collect::<Result<Vec<_>>>()?, 0)?;
        Ok(Self {
            qkv: Dense::new(&weight, precision)?,
            qkv_bias: bias,
            num_heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `xs`: `(rows, hidden)`, texts packed one after another
    /// (`lengths[i]` rows each, `Σ lengths = rows`). Returns `(rows, hidden)`.
    pub fn forward(&self, xs: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        use crate::profile::{Op, time};
        let qkv = time(Op::QkvMatmul, || self.qkv.forward(xs))?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        time(Op::Attention, || {
            crate::kernels::attention(&qkv, &self.qkv_bias, lengths, self.num_heads, scale)
        })
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
    /// `in_size → hidden`.
    dense: Dense,
    /// `(3, hidden)`: the dense bias, the norm's weight and its bias.
    params: Tensor,
    eps: f32,
    /// The path of the layer-norm kernel ([`crate::simd::wide`]).
    kernels: crate::simd::Kernels,
}

impl BertResidualOutput {
    /// Loads `dense` (`in_size` → `hidden_size`) and `LayerNorm` from `vb`.
    pub fn load(
        vb: VarBuilder,
        in_size: usize,
        cfg: &Config,
        precision: Precision,
    ) -> Result<Self> {
        let dense = linear(in_size, cfg.hidden_size, vb.pp("dense"))?;
        let norm = LayerNorm::load(vb.pp("LayerNorm"), cfg.hidden_size, cfg.layer_norm_eps)?;
        Ok(Self {
            dense: Dense::new(dense.weight(), precision)?,
            params: Tensor::stack(&[bias_of(&dense)?, norm.weight, norm.bias], 0)?,
            eps: cfg.layer_norm_eps as f32,
            kernels: crate::simd::Kernels::portable(),
        })
    }

    /// `layer_norm(xs·Wᵀ + b + residual)`, on `(rows, ·)` matrices.
    pub fn forward(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
        self.forward_timed(
            xs,
            residual,
            crate::profile::Op::FfnDownMatmul,
            crate::profile::Op::FfnOutNorm,
        )
    }

    /// [`BertResidualOutput::forward`], its two steps profiled as `ops`.
    fn forward_timed(
        &self,
        xs: &Tensor,
        residual: &Tensor,
        matmul: crate::profile::Op,
        norm: crate::profile::Op,
    ) -> Result<Tensor> {
        use crate::profile::time;
        let xs = time(matmul, || self.dense.forward(xs))?;
        time(norm, || {
            // The product is a fresh tensor: normalise it where it lies.
            crate::kernels::bias_residual_layer_norm_in_place(
                &xs,
                residual,
                &self.params,
                self.eps,
                self.kernels,
            )
        })?;
        Ok(xs)
    }
}

/// Feed-forward expansion with its activation (`intermediate`).
#[derive(Debug, Clone)]
pub struct BertIntermediate {
    /// `hidden → intermediate`.
    dense: Dense,
    /// The path of the f32 epilogue ([`crate::simd::wide`]).
    kernels: crate::simd::Kernels,
    bias: Tensor,
    activation: Activation,
}

impl BertIntermediate {
    /// Loads `dense` (`hidden_size` → `intermediate_size`) from `vb`.
    pub fn load(vb: VarBuilder, cfg: &Config, precision: Precision) -> Result<Self> {
        let dense = linear(cfg.hidden_size, cfg.intermediate_size, vb.pp("dense"))?;
        Ok(Self {
            dense: Dense::new(dense.weight(), precision)?,
            kernels: crate::simd::Kernels::portable(),
            bias: bias_of(&dense)?,
            activation: cfg.hidden_act,
        })
    }
}

impl Module for BertIntermediate {
    /// `(rows, hidden)` → `(rows, intermediate)`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        use crate::profile::{Op, time};
        let xs = time(Op::FfnUpMatmul, || self.dense.forward(xs))?;
        time(Op::FfnGelu, || match self.activation {
            Activation::GeluErf => {
                // The product is a fresh tensor: activate it where it lies.
                crate::kernels::bias_gelu_in_place(&xs, &self.bias, self.kernels)?;
                Ok(xs.clone())
            }
            other => other.forward(&xs.broadcast_add(&self.bias)?),
        })
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
    pub fn load(vb: VarBuilder, cfg: &Config, precision: Precision) -> Result<Self> {
        Ok(Self {
            attention: BertSelfAttention::load(vb.pp("attention").pp("self"), cfg, precision)?,
            attention_output: BertResidualOutput::load(
                vb.pp("attention").pp("output"),
                cfg.hidden_size,
                cfg,
                precision,
            )?,
            intermediate: BertIntermediate::load(vb.pp("intermediate"), cfg, precision)?,
            output: BertResidualOutput::load(
                vb.pp("output"),
                cfg.intermediate_size,
                cfg,
                precision,
            )?,
        })
    }

    /// `(rows, hidden)` → `(rows, hidden)` for packed texts; see
    /// [`BertSelfAttention::forward`].
    pub fn forward(&self, xs: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        use crate::profile::Op;
        let attended = self.attention.forward(xs, lengths)?;
        let xs = self.attention_output.forward_timed(
            &attended,
            xs,
            Op::AttentionOutMatmul,
            Op::AttentionOutNorm,
        )?;
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
        Self::load_with_precision(vb, cfg, Precision::F32)
    }

    /// Like [`BertModel::load`], with the matrix products of every layer in
    /// `precision` (the embeddings stay f32).
    pub fn load_with_precision(vb: VarBuilder, cfg: &Config, precision: Precision) -> Result<Self> {
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
            .map(|i| BertLayer::load(vb_layers.pp(i.to_string()), cfg, precision))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            embeddings,
            layers,
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// Runs the products and the GELU and layer-norm epilogues of every
    /// layer on kernel path `kernels` instead of the process's choice
    /// ([`crate::simd::selected`]); on `amx` the f32 weights are packed for
    /// the tile unit here. Until it is called, the layers run `gemm` and
    /// the AVX2 epilogues.
    pub fn set_kernels(&mut self, kernels: crate::simd::Kernels) -> Result<()> {
        for l in &mut self.layers {
            l.attention.qkv.set_kernels(kernels)?;
            l.attention_output.dense.set_kernels(kernels)?;
            l.attention_output.kernels = kernels;
            l.intermediate.dense.set_kernels(kernels)?;
            l.intermediate.kernels = kernels;
            l.output.dense.set_kernels(kernels)?;
            l.output.kernels = kernels;
        }
        Ok(())
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
    /// tokens of each row. The real tokens are packed and run through
    /// [`BertModel::forward_packed`]; padding rows of the result are zero.
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
        let ids = input_ids.to_vec2::<u32>()?;
        let types = token_type_ids.to_vec2::<u32>()?;
        let pack = |rows: &[Vec<u32>]| -> Vec<u32> {
            rows.iter()
                .zip(lengths)
                .flat_map(|(r, &n)| r[..n].iter().copied())
                .collect()
        };
        let packed = self.forward_packed(&pack(&ids), &pack(&types), lengths)?;
        let width = packed.dim(1)?;
        let packed = packed.flatten_all()?.to_vec1::<f32>()?;
        let mut out = vec![0f32; b * t * width];
        let mut at = 0;
        for (i, &n) in lengths.iter().enumerate() {
            out[i * t * width..(i * t + n) * width].copy_from_slice(&packed[at..at + n * width]);
            at += n * width;
        }
        Tensor::from_vec(out, (b, t, width), &self.device)
    }

    /// Runs the encoder on texts packed one after another without padding:
    /// `input_ids` and `token_type_ids` hold `Σ lengths` tokens, the first
    /// `lengths[0]` of them the first text. Returns `(Σ lengths, hidden)`.
    ///
    /// Every row-wise step (projections, norms, GELU) runs on real tokens
    /// only, and attention stays inside each text, so a batch may mix any
    /// lengths at no padding cost.
    pub fn forward_packed(
        &self,
        input_ids: &[u32],
        token_type_ids: &[u32],
        lengths: &[usize],
    ) -> Result<Tensor> {
        use crate::profile::{Op, time};
        let rows: usize = lengths.iter().sum();
        if input_ids.len() != rows || token_type_ids.len() != rows {
            candle_core::bail!(
                "{} ids and {} type ids for texts of {rows} tokens in all",
                input_ids.len(),
                token_type_ids.len()
            );
        }
        if self.dtype != DType::F32 {
            candle_core::bail!("the encoder runs in f32, not {:?}", self.dtype);
        }
        let mut xs = time(Op::Embeddings, || {
            let positions: Vec<u32> = lengths.iter().flat_map(|&n| 0..n as u32).collect();
            let d = &self.device;
            self.embeddings.forward_packed(
                &Tensor::from_slice(input_ids, rows, d)?,
                &Tensor::from_slice(token_type_ids, rows, d)?,
                &Tensor::from_vec(positions, rows, d)?,
            )
        })?;
        for layer in &self.layers {
            xs = layer.forward(&xs, lengths)?;
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
