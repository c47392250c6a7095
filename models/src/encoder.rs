//! The sentence encoder: tokenizer + BERT + mean pooling + L2 normalisation.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use sha2::{Digest, Sha256};
use tokenizers::{Encoding, PostProcessor, Tokenizer, TruncationDirection};

use crate::bert::{BertModel, Config, Precision};
use crate::error::Error;

/// File name of the model configuration inside a model directory.
pub const CONFIG_FILE: &str = "config.json";
/// File name of the weights inside a model directory.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// File name of the tokenizer inside a model directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// How texts are cut and batched. The defaults are all-MiniLM-L6-v2's recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Longest sequence fed to the model, special tokens included; longer
    /// texts are truncated (and reported in [`EncodeStats::truncated`]).
    /// sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 is 256.
    pub max_tokens: usize,
    /// Most texts per forward pass.
    pub batch_size: usize,
    /// Most tokens per forward pass (texts are packed without padding, so
    /// this is the row count of every matrix product); a text longer than
    /// it runs alone.
    pub batch_tokens: usize,
    /// Precision of the matrix products.
    pub precision: Precision,
    /// Kernel path of the int8 products; `None` for the process's choice
    /// (`TOMLITE_KERNELS`, else the best the CPU has: [`crate::simd`]).
    pub kernels: Option<crate::simd::Kernels>,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            batch_size: 256,
            batch_tokens: 1024,
            precision: Precision::F32,
            kernels: None,
        }
    }
}

/// The result of [`Encoder::encode`]: one vector per text, in the caller's
/// order, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// One L2-normalised vector of [`Encoder::dim`] floats per input text, in
    /// the order of the input.
    pub embeddings: Vec<Vec<f32>>,
    /// Per input text, one entry per span asked for in
    /// [`Encoder::encode_with_spans`] (empty for [`Encoder::encode`]): the
    /// mean of the text's own token states over the span, L2-normalised, or
    /// `None` when no token of the span is inside the (truncated) window.
    pub spans: Vec<Vec<Option<Vec<f32>>>>,
    /// Token counts, padding and truncation.
    pub stats: EncodeStats,
}

/// Counters of one [`Encoder::encode`] call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodeStats {
    /// Per input text, in input order: its token count with special tokens,
    /// before truncation.
    pub token_counts: Vec<usize>,
    /// Real tokens fed to the model (after truncation, special tokens
    /// included, padding excluded).
    pub tokens: usize,
    /// Padding positions computed. Texts are packed without padding, so
    /// this stays 0; kept so that receipts can show it.
    pub padded_tokens: usize,
    /// Indices (into the input) of the texts that were longer than
    /// [`EncodeOptions::max_tokens`] and were cut to it, ascending.
    pub truncated: Vec<usize>,
    /// Number of forward passes.
    pub batches: usize,
}

/// A sentence encoder with the all-MiniLM-L6-v2 recipe: tokenize with
/// special tokens, truncate, BERT, mean pooling over the attention mask, L2
/// normalisation.
pub struct Encoder {
    model: BertModel,
    /// The kernel path of the int8 products, decided at load.
    kernels: crate::simd::Kernels,
    tokenizer: Tokenizer,
    config: Config,
    options: EncodeOptions,
    sha256: String,
    adapters_sha256: Option<String>,
    dir: PathBuf,
    /// Special tokens the post-processor adds to a single sequence.
    added_tokens: usize,
}

impl std::fmt::Debug for Encoder {
    // Not derived: the tokenizer's Debug prints its whole vocabulary.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("dir", &self.dir)
            .field("sha256", &self.sha256)
            .field("adapters_sha256", &self.adapters_sha256)
            .field("options", &self.options)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// Loads `config.json`, `model.safetensors` and `tokenizer.json` from
    /// `dir` with the default [`EncodeOptions`].
    pub fn load(dir: &Path) -> Result<Self, Error> {
        Self::load_with_options(dir, EncodeOptions::default())
    }

    /// Loads the model in `dir` with the given options.
    ///
    /// `max_tokens` is capped at the model's `max_position_embeddings`.
    pub fn load_with_options(dir: &Path, options: EncodeOptions) -> Result<Self, Error> {
        Self::from_base(Base::load(dir, options)?, None)
    }

    /// Loads the model in `dir` with LoRA adapters (an adapters file as
    /// [`crate::finetune::FineTuned::save`] writes it) merged into its
    /// weights at load: `W' = W + (B·A)·alpha/rank`. The merged weights run
    /// through the same fused f32 or int8 path as the base model, at the
    /// same speed. [`Encoder::sha256`] stays the base weights' hash;
    /// [`Encoder::adapters_sha256`] is the adapters file's, which callers
    /// put in the annotator id so that state never mixes models.
    pub fn load_with_adapters(
        dir: &Path,
        adapters: &Path,
        options: EncodeOptions,
    ) -> Result<Self, Error> {
        let bytes = read(adapters)?;
        let sha = crate::lora::sha256_hex(&bytes);
        let ts = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(|e| {
            Error::Adapters {
                path: adapters.to_path_buf(),
                message: e.to_string(),
            }
        })?;
        let adapters_set = crate::lora::Adapters::from_tensors(&ts, adapters)?;
        Self::from_base(Base::load(dir, options)?, Some((&adapters_set, sha)))
    }

    fn from_base(
        mut base: Base,
        adapters: Option<(&crate::lora::Adapters, String)>,
    ) -> Result<Self, Error> {
        let adapters_sha256 = match adapters {
            Some((a, sha)) => {
                a.merge_into(&mut base.weights)?;
                Some(sha)
            }
            None => None,
        };
        let load_err = |source| Error::LoadWeights {
            path: base.weights_path.clone(),
            source,
        };
        // The one dispatch point: the kernel path is decided here, at load.
        let kernels = match base.options.kernels {
            Some(k) => k,
            None => crate::simd::selected()?,
        };
        let vb = VarBuilder::from_tensors(base.weights, DType::F32, &Device::Cpu);
        let mut model = BertModel::load_with_precision(vb, &base.config, base.options.precision)
            .map_err(load_err)?;
        model.set_kernels(kernels).map_err(load_err)?;
        Ok(Self {
            model,
            kernels,
            tokenizer: base.tokenizer.tokenizer,
            config: base.config,
            options: base.options,
            sha256: base.sha256,
            adapters_sha256,
            dir: base.dir,
            added_tokens: base.tokenizer.added_tokens,
        })
    }

    /// The kernel path of the int8 products, decided at load.
    pub fn kernels(&self) -> crate::simd::Kernels {
        self.kernels
    }

    /// Hex sha256 of the adapters file merged at load, if any.
    pub fn adapters_sha256(&self) -> Option<&str> {
        self.adapters_sha256.as_deref()
    }

    /// Sets the token budget of a forward pass (at least 1).
    pub fn set_batch_tokens(&mut self, batch_tokens: usize) {
        self.options.batch_tokens = batch_tokens.max(1);
    }

    /// Returns the encoder with another batch size (at least 1).
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.options.batch_size = batch_size.max(1);
        self
    }

    /// Sets the batch size (at least 1).
    pub fn set_batch_size(&mut self, batch_size: usize) {
        self.options.batch_size = batch_size.max(1);
    }

    /// Hex sha256 of `model.safetensors`: the encoder's identity in receipts
    /// and state.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Width of the output vectors (384 for all-MiniLM-L6-v2).
    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// The options in force (`max_tokens` after capping).
    pub fn options(&self) -> EncodeOptions {
        self.options
    }

    /// The model's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The directory the model was loaded from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Encodes `texts` into L2-normalised vectors, returned in input order.
    ///
    /// Texts are tokenised on every core, sorted by token count (longest
    /// first) and packed back to back, without padding, into forward passes
    /// of at most [`EncodeOptions::batch_tokens`] tokens and
    /// [`EncodeOptions::batch_size`] texts. Texts over
    /// [`EncodeOptions::max_tokens`] are truncated and listed in
    /// [`EncodeStats::truncated`].
    pub fn encode(&self, texts: &[&str]) -> Result<Encoded, Error> {
        self.encode_with_spans(texts, &[])
    }

    /// Like [`Encoder::encode`], and also pools each text's token states
    /// over byte spans of that text (`spans[i]` belongs to `texts[i]`;
    /// `spans` may be shorter than `texts`).
    ///
    /// A span's vector is the mean of the hidden states of the text's word
    /// pieces that overlap the span, L2-normalised: a sentence read in the
    /// context of its record, from the same forward pass as the record. It
    /// costs no extra pass, where encoding every sentence on its own would
    /// roughly double the tokens. A span with no word piece inside the
    /// truncated window gets `None`.
    pub fn encode_with_spans(
        &self,
        texts: &[&str],
        spans: &[Vec<(usize, usize)>],
    ) -> Result<Encoded, Error> {
        let mut stats = EncodeStats {
            token_counts: Vec::with_capacity(texts.len()),
            ..EncodeStats::default()
        };
        // Tokenise on every core: the tokenizer is shared read-only.
        let tokenized: Vec<Result<(Encoding, usize), Error>> =
            crate::profile::time(crate::profile::Op::Tokenize, || {
                use rayon::prelude::*;
                texts
                    .par_iter()
                    .enumerate()
                    .map(|(index, text)| {
                        let with_offsets = spans.get(index).is_some_and(|s| !s.is_empty());
                        self.tokenize(text, index, with_offsets)
                    })
                    .collect()
            });
        let mut encodings = Vec::with_capacity(texts.len());
        for (index, result) in tokenized.into_iter().enumerate() {
            let (encoding, full_len) = result?;
            stats.token_counts.push(full_len);
            if full_len > encoding.len() {
                stats.truncated.push(index);
            }
            stats.tokens += encoding.len();
            encodings.push(encoding);
        }

        // Longest first: the biggest batch runs (and fails, if it must) first.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));

        let dim = self.dim();
        let mut embeddings = vec![Vec::new(); texts.len()];
        let mut span_vectors: Vec<Vec<Option<Vec<f32>>>> = vec![Vec::new(); texts.len()];
        let mut start = 0;
        while start < order.len() {
            // Texts up to the token budget (at least one) and the count limit.
            let mut end = start;
            let mut tokens = 0;
            while end < order.len() && end - start < self.options.batch_size {
                let len = encodings[order[end]].len();
                if end > start && tokens + len > self.options.batch_tokens {
                    break;
                }
                tokens += len;
                end += 1;
            }
            let chunk = &order[start..end];
            start = end;
            let batch: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            stats.batches += 1;
            let hidden = self
                .forward_batch(&batch)
                .map_err(|source| Error::Forward {
                    texts: batch.len(),
                    seq_len: batch.iter().map(|e| e.len()).max().unwrap_or(0),
                    source,
                })?;
            crate::profile::time(crate::profile::Op::Pooling, || {
                let mut at = 0;
                for &i in chunk {
                    let encoding = &encodings[i];
                    let states = &hidden[at * dim..(at + encoding.len()) * dim];
                    at += encoding.len();
                    let mut v = mean_rows(states, dim, 0..encoding.len());
                    normalize(&mut v);
                    embeddings[i] = v;
                    if let Some(text_spans) = spans.get(i) {
                        span_vectors[i] = text_spans
                            .iter()
                            .map(|&span| span_vector(states, dim, encoding, span))
                            .collect();
                    }
                }
            });
        }
        Ok(Encoded {
            embeddings,
            spans: span_vectors,
            stats,
        })
    }

    /// Tokenizes one text with special tokens, truncated to `max_tokens`.
    /// Returns the encoding and the untruncated length. Byte offsets are
    /// tracked only when `with_offsets` (they cost tokenizer time).
    fn tokenize(
        &self,
        text: &str,
        index: usize,
        with_offsets: bool,
    ) -> Result<(Encoding, usize), Error> {
        tokenize(
            &self.tokenizer,
            self.added_tokens,
            self.options.max_tokens,
            text,
            index,
            with_offsets,
        )
    }

    /// Packs the batch's tokens one text after another and runs BERT;
    /// returns the last hidden states, `(Σ lengths, dim)` flattened.
    fn forward_batch(&self, batch: &[&Encoding]) -> candle_core::Result<Vec<f32>> {
        let ids: Vec<u32> = batch.iter().flat_map(|e| e.get_ids()).copied().collect();
        let type_ids: Vec<u32> = batch
            .iter()
            .flat_map(|e| e.get_type_ids())
            .copied()
            .collect();
        let lengths: Vec<usize> = batch.iter().map(|e| e.len()).collect();
        let hidden = self.model.forward_packed(&ids, &type_ids, &lengths)?;
        hidden.flatten_all()?.to_vec1::<f32>()
    }
}

/// Tokenizes one text with special tokens, truncated to `max_tokens` the
/// way Hugging Face truncates a single sequence (the first
/// `max_tokens - specials` word pieces, then the specials). Returns the
/// encoding and the untruncated length.
pub(crate) fn tokenize(
    tokenizer: &Tokenizer,
    added_tokens: usize,
    max_tokens: usize,
    text: &str,
    index: usize,
    with_offsets: bool,
) -> Result<(Encoding, usize), Error> {
    let tokenize_err = |source| Error::Tokenize { index, source };
    let mut encoding = if with_offsets {
        tokenizer.encode(text, false)
    } else {
        tokenizer.encode_fast(text, false)
    }
    .map_err(tokenize_err)?;
    let full_len = encoding.len() + added_tokens;
    if full_len > max_tokens {
        encoding.truncate(max_tokens - added_tokens, 0, TruncationDirection::Right);
        drop(encoding.take_overflowing());
    }
    let encoding = tokenizer
        .post_process(encoding, None, true)
        .map_err(tokenize_err)?;
    Ok((encoding, full_len))
}

/// The tokenizer as the encoder configures it.
pub(crate) struct BaseTokenizer {
    pub(crate) tokenizer: Tokenizer,
    /// Special tokens the post-processor adds to a single sequence.
    pub(crate) added_tokens: usize,
}

/// A model directory read and checked, before the model is built: what
/// both the inference encoder and the training forward start from.
pub(crate) struct Base {
    pub(crate) config: Config,
    pub(crate) tokenizer: BaseTokenizer,
    /// The options, `max_tokens` capped at the model's positions.
    pub(crate) options: EncodeOptions,
    /// The weights by name, without a `bert.` prefix.
    pub(crate) weights: std::collections::HashMap<String, candle_core::Tensor>,
    pub(crate) weights_path: PathBuf,
    pub(crate) sha256: String,
    pub(crate) dir: PathBuf,
}

impl Base {
    pub(crate) fn load(dir: &Path, options: EncodeOptions) -> Result<Self, Error> {
        let config_path = dir.join(CONFIG_FILE);
        let weights_path = dir.join(WEIGHTS_FILE);
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        // Say every missing file up front, the first one named.
        for path in [&config_path, &weights_path, &tokenizer_path] {
            if !path.is_file() {
                return Err(Error::MissingFile { path: path.clone() });
            }
        }

        let config_bytes = read(&config_path)?;
        let config: Config =
            serde_json::from_slice(&config_bytes).map_err(|source| Error::ParseConfig {
                path: config_path.clone(),
                source,
            })?;
        validate_config(&config, &config_path)?;

        if options.batch_size == 0 || options.batch_tokens == 0 {
            return Err(Error::InvalidOptions {
                reason: "batch_size and batch_tokens must be at least 1".into(),
            });
        }

        let tokenizer_bytes = read(&tokenizer_path)?;
        let mut tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|source| Error::LoadTokenizer {
                path: tokenizer_path.clone(),
                source,
            })?;
        // tokenizer.json carries its own truncation (128) and fixed padding;
        // this encoder truncates and pads itself so it can count both.
        tokenizer
            .with_truncation(None)
            .map_err(|source| Error::LoadTokenizer {
                path: tokenizer_path.clone(),
                source,
            })?;
        tokenizer.with_padding(None);
        let added_tokens = tokenizer
            .get_post_processor()
            .map_or(0, |pp| pp.added_tokens(false));

        let max_tokens = options.max_tokens.min(config.max_position_embeddings);
        if max_tokens <= added_tokens {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "max_tokens {} leaves no room beside the {added_tokens} special tokens",
                    options.max_tokens
                ),
            });
        }
        let options = EncodeOptions {
            max_tokens,
            ..options
        };

        let bytes = read(&weights_path)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let load_err = |source| Error::LoadWeights {
            path: weights_path.clone(),
            source,
        };
        let mut weights =
            candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).map_err(load_err)?;
        drop(bytes);
        // `BertModel` checkpoints have no prefix; `BertFor*` ones use `bert.`.
        if !weights.contains_key("embeddings.word_embeddings.weight")
            && weights.contains_key("bert.embeddings.word_embeddings.weight")
        {
            weights = weights
                .into_iter()
                .filter_map(|(k, v)| k.strip_prefix("bert.").map(|k| (k.to_string(), v)))
                .collect();
        }
        Ok(Self {
            config,
            tokenizer: BaseTokenizer {
                tokenizer,
                added_tokens,
            },
            options,
            weights,
            weights_path,
            sha256,
            dir: dir.to_path_buf(),
        })
    }
}

/// Mean of the rows `rows` of `states` (`dim` floats per row).
fn mean_rows(states: &[f32], dim: usize, rows: impl Iterator<Item = usize>) -> Vec<f32> {
    let mut sum = vec![0f32; dim];
    let mut n = 0usize;
    for r in rows {
        for (s, x) in sum.iter_mut().zip(&states[r * dim..(r + 1) * dim]) {
            *s += x;
        }
        n += 1;
    }
    let n = n.max(1) as f32;
    for s in &mut sum {
        *s /= n;
    }
    sum
}

/// Divides `v` by its L2 norm (at least 1e-12), as
/// `torch.nn.functional.normalize` does.
fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    for x in v {
        *x /= norm;
    }
}

/// The pooled, normalised vector of the word pieces of `encoding` that
/// overlap the byte span; `None` when there are none.
fn span_vector(
    states: &[f32],
    dim: usize,
    encoding: &Encoding,
    (start, end): (usize, usize),
) -> Option<Vec<f32>> {
    let rows: Vec<usize> = encoding
        .get_offsets()
        .iter()
        .zip(encoding.get_special_tokens_mask())
        .enumerate()
        .filter(|&(_, (&(s, e), &special))| special == 0 && s < end && e > start)
        .map(|(i, _)| i)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut v = mean_rows(states, dim, rows.into_iter());
    normalize(&mut v);
    Some(v)
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::ReadFile {
        path: path.to_path_buf(),
        source,
    })
}

fn validate_config(config: &Config, path: &Path) -> Result<(), Error> {
    let unsupported = |reason: String| {
        Err(Error::UnsupportedConfig {
            path: path.to_path_buf(),
            reason,
        })
    };
    if config.num_attention_heads == 0
        || !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
    {
        return unsupported(format!(
            "hidden_size {} is not a multiple of num_attention_heads {}",
            config.hidden_size, config.num_attention_heads
        ));
    }
    if config.max_position_embeddings == 0 {
        return unsupported("max_position_embeddings is 0".into());
    }
    if let Some(kind) = &config.model_type
        && kind != "bert"
    {
        return unsupported(format!("model_type {kind:?} is not \"bert\""));
    }
    Ok(())
}
