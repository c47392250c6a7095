//! What `tomlite train` is asked to do: the data, the output folder, the
//! heads' optimiser settings and whether the encoder is fine-tuned first.

use std::path::PathBuf;

use tomlite_models::finetune::FineTuneOptions;
use tomlite_models::heads::TrainOptions;

/// What `tomlite train` needs.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// The encoder's directory.
    pub model_dir: PathBuf,
    /// Where to write the heads.
    pub heads_dir: PathBuf,
    /// Labeled ToM-lite JSONL files.
    pub tom_files: Vec<PathBuf>,
    /// Records labeled for sensitive content (`data/sensitivity`); none:
    /// no sensitive head.
    pub sensitivity_files: Vec<PathBuf>,
    /// GoEmotions train split (TSV).
    pub goemotions_train: PathBuf,
    /// GoEmotions dev split (TSV).
    pub goemotions_dev: PathBuf,
    /// Optimiser settings.
    pub options: TrainOptions,
    /// Use only the first N examples of each source (for quick checks).
    pub limit: Option<usize>,
    /// Use at most N GoEmotions train examples (evenly spaced through the file).
    pub max_goemotions: Option<usize>,
    /// Where embeddings of training texts are cached between runs.
    pub cache: Option<PathBuf>,
    /// The node registry of the training data (gold `mentions` are its ids).
    pub nodes: Option<PathBuf>,
    /// A staging directory whose curated decisions become examples.
    pub curated: Option<PathBuf>,
    /// How many training rows each curated example counts for in the
    /// kind, affect and intensity heads (its copies stay in one bag).
    pub curated_weight: usize,
    /// Fine-tune the encoder first (`None`: frozen encoder).
    pub finetune: Option<FineTuneConfig>,
    /// Fit the heads on the encoder with an earlier run's adapters (the
    /// folder of its `adapters.safetensors` and `adapters.json`), copied
    /// into the heads folder, without fine-tuning again.
    pub adapters_from: Option<PathBuf>,
}

impl TrainConfig {
    /// Whether the heads read a fine-tuned encoder (fine-tuned now or with
    /// an earlier run's adapters): then only the calibration records it
    /// never saw are honest for temperatures and calibration.
    pub fn tunes_encoder(&self) -> bool {
        self.finetune.is_some() || self.adapters_from.is_some()
    }
}

/// How `tomlite train` fine-tunes the encoder.
#[derive(Debug, Clone)]
pub struct FineTuneConfig {
    /// Passes over the examples.
    pub epochs: usize,
    /// Seed of the adapters, the heads, the batch order and the
    /// GoEmotions sample.
    pub seed: u64,
    /// GoEmotions comments per epoch, drawn afresh each epoch (seeded)
    /// from the whole train split.
    pub goemotions: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Longest training sequence in tokens.
    pub max_tokens: usize,
    /// Continue from the checkpoint of an interrupted run with the same
    /// settings and data.
    pub resume: bool,
}

impl Default for FineTuneConfig {
    fn default() -> Self {
        let lib = FineTuneOptions::default();
        Self {
            epochs: lib.epochs,
            seed: lib.seed,
            goemotions: 12_000,
            batch_size: lib.batch_size,
            max_tokens: lib.max_tokens,
            resume: false,
        }
    }
}

/// How many training rows a curated example counts for by default. On
/// the held-out style `coach_session_notes` (`scripts/curator-sim`), see
/// docs/curator.md for the curve.
pub const DEFAULT_CURATED_WEIGHT: u32 = 10;

/// Folder of the fine-tuning checkpoint, inside the output folder.
pub const CHECKPOINT_DIR: &str = "checkpoint";
