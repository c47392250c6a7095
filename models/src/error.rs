//! The crate's error type.

use std::path::PathBuf;

/// Everything that can fail while loading or running the encoder.
///
/// One variant per failing operation, each with the path or text it concerns.
/// `Display` describes the operation only; the cause is the `source()`, so a
/// chain printer (anyhow's `{:#}`) says it once.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model file is not in the model directory.
    #[error(
        "model file {} not found; run `scripts/fetch-model` to download the encoder",
        path.display()
    )]
    MissingFile {
        /// The path that was looked for.
        path: PathBuf,
    },

    /// A model file exists but could not be read.
    #[error("failed to read {}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// `config.json` is not a BERT configuration this crate understands.
    #[error("failed to parse the model configuration {}", path.display())]
    ParseConfig {
        /// The configuration file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },

    /// `config.json` parsed but describes a model this encoder cannot run.
    #[error("unsupported model configuration in {}: {reason}", path.display())]
    UnsupportedConfig {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// `tokenizer.json` could not be loaded or configured.
    #[error("failed to load the tokenizer {}", path.display())]
    LoadTokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers error.
        #[source]
        source: tokenizers::Error,
    },

    /// The weights could not be loaded into the model (bad file, missing or
    /// mis-shaped tensor).
    #[error("failed to load the model weights {}", path.display())]
    LoadWeights {
        /// The safetensors file.
        path: PathBuf,
        /// The candle error.
        #[source]
        source: candle_core::Error,
    },

    /// `TOMLITE_KERNELS` names no kernel path, or one this CPU lacks.
    #[error(transparent)]
    Kernels(#[from] crate::simd::KernelsError),

    /// The encoding options are invalid.
    #[error("invalid encoder options: {reason}")]
    InvalidOptions {
        /// What is wrong with them.
        reason: String,
    },

    /// A text could not be tokenized.
    #[error("failed to tokenize text {index} of the batch")]
    Tokenize {
        /// Index of the text in the caller's slice.
        index: usize,
        /// The tokenizers error.
        #[source]
        source: tokenizers::Error,
    },

    /// The forward pass failed on a batch.
    #[error("forward pass failed on a batch of {texts} texts padded to {seq_len} tokens")]
    Forward {
        /// Number of texts in the failing batch.
        texts: usize,
        /// Padded sequence length of the batch.
        seq_len: usize,
        /// The candle error.
        #[source]
        source: candle_core::Error,
    },

    /// A file could not be read or written.
    #[error("cannot {op} {}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A labeled data line is not valid.
    #[error("{}, line {line}: {message}", path.display())]
    Data {
        /// The data file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        message: String,
    },

    /// A head's training loss stopped being a finite number: the heads
    /// it would give are not written.
    #[error("training of the {head} head diverged: loss {loss} in epoch {epoch}")]
    Diverged {
        /// The head.
        head: String,
        /// The epoch, from 1.
        epoch: usize,
        /// The loss (NaN or infinite).
        loss: f64,
    },

    /// The heads' files are missing or do not fit their card.
    #[error("heads {}: {message}", path.display())]
    Heads {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },

    /// An adapters file or a training checkpoint is missing, unreadable or
    /// does not fit the model or the run.
    #[error("adapters {}: {message}", path.display())]
    Adapters {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },

    /// Floats that do not make whole rows of the width they were given.
    #[error("{floats} floats do not make rows of {dim}")]
    RowsShape {
        /// How many floats (of the data, or of the row that does not fit).
        floats: usize,
        /// The row width asked for.
        dim: usize,
    },

    /// A file of embedding rows could not be read (or lacks the rows).
    #[error("cannot read the embedding rows {}", path.display())]
    ReadRows {
        /// The safetensors file.
        path: PathBuf,
        /// The candle error.
        #[source]
        source: candle_core::Error,
    },

    /// A file of embedding rows could not be written.
    #[error("cannot write the embedding rows {}", path.display())]
    WriteRows {
        /// The safetensors file.
        path: PathBuf,
        /// The candle error.
        #[source]
        source: candle_core::Error,
    },

    /// A tensor operation of the heads failed.
    #[error("tensor operation failed")]
    Candle(#[from] candle_core::Error),
}
