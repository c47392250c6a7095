//! tomlite's models: the sentence encoder that every classification head
//! reads from.
//!
//! The encoder is `sentence-transformers/all-MiniLM-L6-v2` (BERT, 6 layers,
//! 384 wide) run with candle on the CPU, with sentence-transformers' recipe:
//! WordPiece tokens with `[CLS]`/`[SEP]`, truncation to 256 tokens, the BERT
//! forward pass ([`bert`]), mean pooling over the attention mask and L2
//! normalisation. Its three files (`config.json`, `model.safetensors`,
//! `tokenizer.json`) are put under `models/artifacts/all-MiniLM-L6-v2/` by
//! `scripts/fetch-model`; nothing is downloaded at run time.
//!
//! [`Encoder::encode`] takes a whole slice of texts, packs their tokens
//! back to back (no padding) into forward passes of a token budget, and
//! returns the vectors in the caller's order together with [`EncodeStats`]:
//! token counts and which texts were truncated. Truncation is always
//! reported, never silent. [`Encoder::sha256`] is the weights' hash, the
//! model's identity in receipts.
//!
//! Callers hand the heads ([`heads`]) plain `f32` [`Rows`] and
//! labels and get logits or probabilities back; candle stays inside this
//! crate.
//!
//! # Example
//!
//! ```no_run
//! use std::path::Path;
//! use tomlite_models::Encoder;
//!
//! # fn main() -> Result<(), tomlite_models::Error> {
//! let encoder = Encoder::load(Path::new("models/artifacts/all-MiniLM-L6-v2"))?;
//! let out = encoder.encode(&["Keep answers short.", "Sam prefers code first."])?;
//! assert_eq!(out.embeddings.len(), 2);
//! assert_eq!(out.embeddings[0].len(), encoder.dim()); // 384
//! let cosine: f32 = out.embeddings[0]
//!     .iter()
//!     .zip(&out.embeddings[1])
//!     .map(|(a, b)| a * b)
//!     .sum(); // the vectors have unit norm
//! println!("cosine {cosine:.3}, model {}", encoder.sha256());
//! for &i in &out.stats.truncated {
//!     println!("text {i} had {} tokens and was truncated", out.stats.token_counts[i]);
//! }
//! # Ok(())
//! # }
//! ```

pub mod amx;
pub mod bert;
pub mod cues;
pub mod data;
mod encoder;
mod error;
pub mod finetune;
pub mod heads;
pub mod kernels;
pub mod lexical;
pub mod lora;
pub mod metrics;
pub mod profile;
pub mod quant;
pub mod rows;
pub mod simd;

pub use bert::Precision;
pub use encoder::{
    CONFIG_FILE, EncodeOptions, EncodeStats, Encoded, Encoder, TOKENIZER_FILE, WEIGHTS_FILE,
};
pub use error::Error;
pub use rows::{HeadInput, Rows};

/// The model directory `scripts/fetch-model` fills, relative to the
/// repository root.
pub const DEFAULT_MODEL_DIR: &str = "models/artifacts/all-MiniLM-L6-v2";

/// Helpers of the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    /// A deterministic pseudo-random value in [−1, 1) (an LCG step).
    pub fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}
