//! The local classifier: the MiniLM encoder plus the trained heads, as an
//! [`Annotator`]. It is the default annotator of `tomlite run`. When the
//! heads were fitted on a fine-tuned encoder, its LoRA adapters are merged
//! into the encoder's weights at load ([`Classifier::load_with_adapters`]).
//!
//! Per record: one forward pass over the text (identical texts once per
//! pass); the heads give tom_kind probabilities (multi-label), an affect and
//! an intensity from the text's embedding, and score each sentence on the
//! text's token states pooled over it. A tag's confidence is the
//! probability that the tag is right, from the card's tag calibration
//! (the kind's probability and its nearest rival's). Up to two kinds are
//! tagged (primary first; a second one only when its confidence clears
//! [`SECOND_KIND_MIN`]), each quoted by the sentence its kind scores highest
//! on, at its byte offsets. The classifier abstains (no tag, but still an
//! affect and an intensity) when the primary tag's confidence is under the
//! policy's `classifier_policy.abstain_below`.

use std::path::{Path, PathBuf};

use foldhash::{HashMap, HashMapExt};
use sha2::{Digest as _, Sha256};
use tomlite_models::cues::head_input;
use tomlite_models::heads::Heads;
use tomlite_models::metrics::{EdgeCalibration, argmax, sigmoid_t, softmax_t};
use tomlite_models::{EncodeStats, Encoded, Encoder, Precision, Rows};

use crate::annotate::sensitive_rules::Rules;
use crate::annotate::{
    AnnotateError, Annotated, Annotation, Annotator, AnnotatorInfo, EdgeCandidate, Quote, Scored,
    Sensitive, TagCandidate,
};
use crate::graph::memory::{MemoryIndex, quantize};
use crate::graph::mentions::{CANDIDATE_FEATURES, Candidate, Linked, Linker, candidates, fold};
use crate::graph::nodes::Registry;
use crate::ingest::record::{Record, truncate};
use crate::segment::{passages_of, sentences};

mod annotation;
mod scoring;

/// Records the classifier scores per pass: enough that sorting texts by
/// length leaves almost no padding in the encoder's batches.
pub const RECORDS_PER_PASS: usize = 1024;

/// A second tom_kind is tagged only when its probability reaches this.
pub const SECOND_KIND_MIN: f32 = 0.5;

/// Where the encoder and the heads live, relative to the repository.
pub const DEFAULT_MODEL_DIR: &str = "models/artifacts/all-MiniLM-L6-v2";
/// Where the trained heads live, relative to the repository.
pub const DEFAULT_HEADS_DIR: &str = "models/artifacts/heads";
/// Where `tomlite train` writes the fine-tuned adapters and their heads,
/// relative to the repository.
pub const DEFAULT_ADAPTERS_DIR: &str = "models/artifacts/adapters";
/// The adapters' file in a heads or adapters folder.
pub use tomlite_models::finetune::ADAPTERS_FILE;

/// The classifier cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ClassifierError {
    /// The encoder or the heads failed to load.
    #[error("cannot load the local classifier from {}", dir.display())]
    Load {
        /// The directory.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: Box<tomlite_models::Error>,
    },
    /// The adapters are not the ones the heads were trained with.
    #[error(
        "heads in {} were trained with {expected}, but the encoder was loaded with {found}; use the heads of those adapters or retrain with `tomlite train`",
        dir.display()
    )]
    AdaptersMismatch {
        /// The heads directory.
        dir: PathBuf,
        /// What the heads' card names (`no adapters` or `adapters <sha256>`).
        expected: String,
        /// What was loaded, the same way.
        found: String,
    },
    /// The heads were trained on another encoder.
    #[error(
        "heads in {} were trained on encoder {expected}, but the encoder's weights are {found}; retrain with `tomlite train`",
        dir.display()
    )]
    EncoderMismatch {
        /// The heads directory.
        dir: PathBuf,
        /// What the card names.
        expected: String,
        /// What was loaded.
        found: String,
    },
}

/// Running totals of what the encoder did, for the receipt.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ClassifierStats {
    /// Texts encoded (after deduplication).
    pub texts_encoded: u64,
    /// Texts that were identical to another in the same batch and reused.
    pub texts_deduplicated: u64,
    /// Texts scored earlier in the run (another batch) and taken from the
    /// run's score cache instead of the encoder.
    pub texts_cached: u64,
    /// Real tokens encoded.
    pub tokens: u64,
    /// Padding tokens encoded.
    pub padded_tokens: u64,
    /// Texts truncated to the encoder's limit.
    pub truncated_texts: u64,
    /// Records whose whole text was truncated for the record-level
    /// embedding (their sentences are still embedded one by one); the first 1,000.
    pub truncated_records: Vec<String>,
}

/// The encoder and the heads.
pub struct Classifier {
    encoder: Encoder,
    heads: Heads,
    abstain_below: f64,
    id: String,
    /// The id's prefix (`minilm-l6+lora`, ...), before `+heads@`.
    id_prefix: String,
    /// sha256 of the model, heads and settings, before the sensitive
    /// content settings join it.
    model_sha256: String,
    sha256: String,
    /// The identifier rules of the sensitive content detector.
    rules: Rules,
    /// P(sensitive) at or above which a record is detected; `None`: the
    /// detector is off.
    sensitive_thresholds: Option<crate::annotate::sensitive::Thresholds>,
    digest: tomlite_staging::Digest,
    /// Registry names and aliases, when a registry was given.
    linker: Option<Linker>,
    /// Committed memories, for memory-to-memory links.
    memories: MemoryIndex,
    /// When set: each memory's created_at; a link then points only at a
    /// memory written before its record (evaluation on labeled data, where
    /// every record is in the pool).
    memory_times: Option<HashMap<String, String>>,
    /// Scores of the texts seen so far in this run, by text hash.
    cache: ScoreCache,
    /// Embeddings of sentences encoded on their own (past a truncated
    /// text's window) so far in this run, by sentence hash.
    sentence_cache: Generations<Vec<f32>>,
    /// What the encoder did so far.
    pub stats: ClassifierStats,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier").field("id", &self.id).finish()
    }
}

/// One record's probabilities and quotes, before they become an annotation.
#[derive(Debug, Clone)]
pub struct Scores {
    /// Calibrated probability per tom_kind, in the heads' label order.
    pub tom_kind: Vec<f32>,
    /// Calibrated affect distribution.
    pub affect: Vec<f32>,
    /// Calibrated intensity distribution.
    pub intensity: Vec<f32>,
    /// Per tom_kind: the best-supporting sentence `(start, end)`.
    pub quotes: Vec<(usize, usize)>,
    /// The text was longer than the encoder's limit and truncated.
    pub truncated: bool,
    /// Uncalibrated logits of the text: tom_kind, affect, intensity.
    pub logits: [Vec<f32>; 3],
    /// The text's embedding (unit length).
    pub embedding: Vec<f32>,
    /// Sentence spans of the text, long sentences cut into passages
    /// ([`crate::segment::passages`]): what is scored and quoted.
    pub sentences: Vec<(usize, usize)>,
    /// Per sentence: its most likely tom_kind and that kind's calibrated probability.
    pub sentence_kinds: Vec<(usize, f32)>,
    /// Registry names and aliases in the text.
    pub linked: Vec<Linked>,
    /// Person-like names not in the registry, with P(person).
    pub unknown: Vec<(Candidate, f32)>,
    /// The sensitive head's calibrated distribution (`none` first); empty
    /// without the head.
    pub sensitive: Vec<f32>,
    /// Per sentence: P(sensitive) from the same head on its vector.
    pub sentence_sensitive: Vec<f32>,
    /// Per sentence: the head's most likely category on its vector (an
    /// index into its labels, 1 and up; 0 where the sentence has no row,
    /// and the record's category stands); empty when the text is its one
    /// sentence (the record's distribution says it).
    pub sentence_sensitive_category: Vec<u8>,
    /// The lexical sensitive model's P of the whole text, then of each
    /// sentence; empty without one.
    pub sensitive_lexical: Vec<f32>,
}

/// A text's identity in the score cache: the first 16 bytes of its sha256.
type TextKey = [u8; 16];

fn text_key(text: &str) -> TextKey {
    let digest = Sha256::digest(text.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// Scores of recently seen texts, by text hash.
pub type ScoreCache = Generations<Scores>;

/// A bounded map of recently used entries: two generations of at most
/// [`Generations::GENERATION`] entries each; when the young one is full the
/// old one is dropped and the young one ages, and a hit in the old one moves
/// the entry back to the young one. An entry used again within about that
/// many distinct keys is found, and memory stays flat whatever the input
/// size (a [`Scores`] entry is about 2 KB: 32k entries at most, ≈ 64 MB).
pub struct Generations<V> {
    young: HashMap<TextKey, V>,
    old: HashMap<TextKey, V>,
}

impl<V> Default for Generations<V> {
    fn default() -> Self {
        Self {
            young: HashMap::new(),
            old: HashMap::new(),
        }
    }
}

impl<V> Generations<V> {
    /// Entries per generation.
    pub const GENERATION: usize = 16_384;

    fn get(&mut self, key: &TextKey) -> Option<&V> {
        if !self.young.contains_key(key)
            && let Some(v) = self.old.remove(key)
        {
            self.insert(*key, v);
        }
        self.young.get(key)
    }

    fn insert(&mut self, key: TextKey, value: V) {
        if self.young.len() >= Self::GENERATION {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, value);
    }
}

/// Tom_kinds whose tags look for an earlier memory to link to.
pub const MEMORY_LINK_KINDS: [&str; 2] = ["unresolved_thread", "goal"];

/// A sentence's byte span and its P(sensitive).
type SentenceP = ((usize, usize), f64);

/// The sensitive detector's view of a record's scores: the head's
/// distribution (`none` first; empty without a head), every sentence with
/// its P(sensitive) (0 where there is no head: the rules still quote the
/// sentence that holds their finding), the lexical model's P of the
/// text and of each sentence (empty without one), and each sentence's
/// most likely category (empty for a text of one sentence).
fn sensitive_inputs(s: &Scores) -> (Vec<f64>, Vec<SentenceP>, Vec<f64>, Vec<usize>) {
    let record = s.sensitive.iter().map(|&p| f64::from(p)).collect();
    let sentences = s
        .sentences
        .iter()
        .enumerate()
        .map(|(i, &span)| {
            let p = s.sentence_sensitive.get(i).copied().unwrap_or(0.0);
            (span, f64::from(p))
        })
        .collect();
    let lexical = s.sensitive_lexical.iter().map(|&p| f64::from(p)).collect();
    let categories = s
        .sentence_sensitive_category
        .iter()
        .map(|&c| usize::from(c))
        .collect();
    (record, sentences, lexical, categories)
}

/// `adapters <sha256>`, or `no adapters`.
fn describe(adapters: Option<&str>) -> String {
    adapters.map_or_else(|| "no adapters".to_string(), |a| format!("adapters {a}"))
}

fn to_f32(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|x| x as f32).collect()
}

impl Classifier {
    /// Loads the encoder from `model_dir` and the heads from `heads_dir`,
    /// with the LoRA adapters of `heads_dir` ([`ADAPTERS_FILE`]) merged
    /// into the encoder's weights when the folder has them
    /// ([`Classifier::load_with_adapters`]).
    ///
    /// `precision` is the encoder's ([`Precision`]); an int8 encoder is
    /// another annotator (its identity says so), as its scores differ from
    /// the f32 ones in the third decimal.
    pub fn load(
        model_dir: &Path,
        heads_dir: &Path,
        abstain_below: f64,
        precision: Precision,
    ) -> Result<Self, ClassifierError> {
        Self::load_with_adapters(model_dir, heads_dir, None, abstain_below, precision)
    }

    /// [`Classifier::load`] with the adapters taken from `adapters_dir`
    /// (its [`ADAPTERS_FILE`]) instead of `heads_dir`.
    ///
    /// The adapters are merged into the base weights at load
    /// (`W + B·A·alpha/rank`), so the fused f32 and int8 paths run as
    /// without them. The heads' card names the adapters they were trained
    /// with (`training.adapters_sha256`); loading other adapters, or none
    /// where the card names some, is an error. The annotator id then
    /// covers the adapters' sha256 too, so state never mixes models;
    /// without adapters the id is what it always was.
    pub fn load_with_adapters(
        model_dir: &Path,
        heads_dir: &Path,
        adapters_dir: Option<&Path>,
        abstain_below: f64,
        precision: Precision,
    ) -> Result<Self, ClassifierError> {
        let encoder = load_encoder(model_dir, heads_dir, adapters_dir, precision)?;
        let heads = Heads::load(heads_dir).map_err(|source| ClassifierError::Load {
            dir: heads_dir.to_path_buf(),
            source: Box::new(source),
        })?;
        check_heads_fit(&heads, &encoder, heads_dir)?;
        let (id_prefix, model_sha256) =
            model_identity(&encoder, (model_dir, heads_dir), abstain_below, precision);
        let mut classifier = Self {
            id: String::new(),
            id_prefix,
            digest: [0; 16],
            sha256: String::new(),
            model_sha256,
            rules: Rules::new(),
            sensitive_thresholds: None,
            encoder,
            heads,
            abstain_below,
            linker: None,
            memories: MemoryIndex::default(),
            memory_times: None,
            cache: ScoreCache::default(),
            sentence_cache: Generations::default(),
            stats: ClassifierStats::default(),
        };
        classifier
            .set_sensitive_thresholds(Some(crate::annotate::sensitive::Thresholds::default()));
        Ok(classifier)
    }

    /// Detects sensitive content at or above `thresholds` (the policy's
    /// `persona_memory_policy.sensitive_content.threshold` and
    /// `safety_threshold`); `None` turns the detector off. The annotator id
    /// covers the setting, the rules' version and the reading's: annotations
    /// made under another one are redone.
    pub fn set_sensitive_thresholds(
        &mut self,
        thresholds: Option<crate::annotate::sensitive::Thresholds>,
    ) {
        self.sensitive_thresholds = thresholds;
        let mut h = Sha256::new();
        h.update(self.model_sha256.as_bytes());
        match thresholds {
            Some(t) => {
                h.update(b"sensitive");
                h.update(t.general.to_le_bytes());
                h.update(b"safety");
                h.update(t.safety.to_le_bytes());
                h.update(crate::annotate::sensitive::RULES_VERSION.as_bytes());
                h.update(crate::annotate::sensitive::READING_VERSION.as_bytes());
            }
            None => h.update(b"sensitive: off"),
        }
        self.sha256 = hex::encode(h.finalize());
        self.id = format!("{}+heads@{}", self.id_prefix, &self.sha256[..12]);
        self.digest = truncate(&hex::decode(&self.sha256).unwrap_or_default());
    }

    /// The sensitive content detected in `text` (scored as `s`), when the
    /// detector is on ([`crate::annotate::sensitive::detect`]).
    pub fn detect_sensitive(&self, text: &str, s: &Scores) -> Option<Sensitive> {
        let thresholds = self.sensitive_thresholds?;
        let (record, sentences, lexical, categories) = sensitive_inputs(s);
        crate::annotate::sensitive::detect(
            text,
            (!record.is_empty()).then_some(record.as_slice()),
            &sentences,
            &lexical,
            &categories,
            &self.rules,
            &thresholds,
        )
    }

    /// P(sensitive) of `text` as the detector sees it: 1 when the rules
    /// find an identifier, else the head's
    /// ([`crate::annotate::sensitive::head_probability`]; 0 without a head).
    pub fn sensitive_probability(&self, text: &str, s: &Scores) -> f64 {
        if !self.rules.find(text).is_empty() {
            return 1.0;
        }
        let (record, sentences, lexical, _) = sensitive_inputs(s);
        if record.is_empty() {
            return 0.0;
        }
        crate::annotate::sensitive::head_probability(&record, &sentences, &lexical)
    }

    /// The detection thresholds, `None` when the detector is off.
    pub fn sensitive_thresholds(&self) -> Option<crate::annotate::sensitive::Thresholds> {
        self.sensitive_thresholds
    }

    /// Links mentions of `registry`'s nodes from now on.
    pub fn set_registry(&mut self, registry: &Registry) {
        // Mentions depend on the registry: earlier scores no longer hold.
        self.cache = Generations::default();
        self.linker = Some(Linker::new(registry));
    }

    /// The memories that memory links may point to from now on.
    pub fn set_memories(&mut self, memories: MemoryIndex) {
        self.memories = memories;
    }

    /// Links only to memories created before their record, by these times.
    pub fn set_memory_times(&mut self, times: HashMap<String, String>) {
        self.memory_times = Some(times);
    }

    /// The kernels of the encoder's matrix products, for summary lines:
    /// `int8 avx512vnni` (the path chosen at load, [`tomlite_models::simd`]),
    /// `f32 amx bf16x3` (the tile unit) or `f32 gemm fma` (gemm's own
    /// run-time choice).
    pub fn kernels(&self) -> String {
        let kernels = self.encoder.kernels();
        match self.encoder.options().precision {
            Precision::Int8 => format!("int8 {}", kernels.path()),
            Precision::F32 => format!("f32 {}", tomlite_models::simd::f32_products(kernels)),
        }
    }

    /// Text embeddings (unit length), one forward pass per text.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, tomlite_models::Error> {
        let e = self.encoder.encode(texts)?;
        self.account(&e.stats, 0);
        Ok(e.embeddings)
    }

    /// The edge calibration of the heads, if they have one.
    pub fn edge_calibration(&self) -> Option<&tomlite_models::metrics::EdgeCalibration> {
        self.heads.card.edges.as_ref()
    }

    /// The labels of the tom_kind head, in probability order.
    pub fn tom_labels(&self) -> &[String] {
        &self.heads.tom_kind.spec.labels
    }

    /// The labels of the affect head.
    pub fn affect_labels(&self) -> &[String] {
        &self.heads.affect.spec.labels
    }

    /// The labels of the intensity head.
    pub fn intensity_labels(&self) -> &[String] {
        &self.heads.intensity.spec.labels
    }
}

/// The encoder of `model_dir`, with the adapters of `adapters_dir` (or of
/// `heads_dir`, when it has an [`ADAPTERS_FILE`]) merged in.
fn load_encoder(
    model_dir: &Path,
    heads_dir: &Path,
    adapters_dir: Option<&Path>,
    precision: Precision,
) -> Result<Encoder, ClassifierError> {
    let options = tomlite_models::EncodeOptions {
        precision,
        ..tomlite_models::EncodeOptions::default()
    };
    let adapters_file = adapters_dir
        .map(|dir| dir.join(ADAPTERS_FILE))
        .or_else(|| Some(heads_dir.join(ADAPTERS_FILE)).filter(|file| file.is_file()));
    match &adapters_file {
        Some(file) => Encoder::load_with_adapters(model_dir, file, options),
        None => Encoder::load_with_options(model_dir, options),
    }
    .map_err(|source| ClassifierError::Load {
        dir: adapters_file
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(model_dir)
            .to_path_buf(),
        source: Box::new(source),
    })
}

/// Fails unless the heads were trained on this encoder with these adapters
/// (or none, as the encoder has none).
fn check_heads_fit(
    heads: &Heads,
    encoder: &Encoder,
    heads_dir: &Path,
) -> Result<(), ClassifierError> {
    if heads.card.encoder_sha256 != encoder.sha256() {
        return Err(ClassifierError::EncoderMismatch {
            dir: heads_dir.to_path_buf(),
            expected: heads.card.encoder_sha256.clone(),
            found: encoder.sha256().to_string(),
        });
    }
    let trained_with = heads.card.training["adapters_sha256"].as_str();
    if trained_with != encoder.adapters_sha256() {
        return Err(ClassifierError::AdaptersMismatch {
            dir: heads_dir.to_path_buf(),
            expected: describe(trained_with),
            found: describe(encoder.adapters_sha256()),
        });
    }
    Ok(())
}

/// The annotator id's prefix (`minilm-l6`, `-int8`, `+lora`) and the
/// sha256 of everything that makes the model's annotations what they are.
/// The annotator's identity: every file the annotations depend on (the
/// encoder's weights, `config.json` and `tokenizer.json`, the adapters, the
/// heads and their card, which holds the calibration) and the settings.
fn model_identity(
    encoder: &Encoder,
    (model_dir, heads_dir): (&Path, &Path),
    abstain_below: f64,
    precision: Precision,
) -> (String, String) {
    let sha_of = |path: std::path::PathBuf| crate::hash::sha256_file(&path).unwrap_or_default();
    let heads_sha = sha_of(heads_dir.join(tomlite_models::heads::HEADS_FILE));
    let mut hasher = Sha256::new();
    hasher.update(encoder.sha256().as_bytes());
    for file in [tomlite_models::CONFIG_FILE, tomlite_models::TOKENIZER_FILE] {
        hasher.update(file.as_bytes());
        hasher.update(sha_of(model_dir.join(file)).as_bytes());
    }
    hasher.update(b"card");
    hasher.update(sha_of(heads_dir.join(tomlite_models::heads::CARD_FILE)).as_bytes());
    if let Some(adapters_sha) = encoder.adapters_sha256() {
        hasher.update(b"lora");
        hasher.update(adapters_sha.as_bytes());
    }
    hasher.update(heads_sha.as_bytes());
    hasher.update(abstain_below.to_le_bytes());
    hasher.update(SECOND_KIND_MIN.to_le_bytes());
    // Edge proposal rules: every linked mention is proposed (weak ones
    // quarantine), so annotations from the earlier rule are redone.
    hasher.update(b"edges: every linked mention");
    // f32 keeps the identity it had before precision was selectable.
    let precision_prefix = match precision {
        Precision::F32 => "minilm-l6",
        Precision::Int8 => {
            hasher.update(precision.as_str().as_bytes());
            "minilm-l6-int8"
        }
    };
    let lora = if encoder.adapters_sha256().is_some() {
        "+lora"
    } else {
        ""
    };
    (
        format!("{precision_prefix}{lora}"),
        hex::encode(hasher.finalize()),
    )
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

impl Annotator for Classifier {
    fn info(&self) -> AnnotatorInfo {
        AnnotatorInfo {
            id: self.id.clone(),
            sha256: self.sha256.clone(),
        }
    }

    fn annotation_digest(
        &mut self,
        _record: &Record,
    ) -> Result<tomlite_staging::Digest, AnnotateError> {
        Ok(self.digest)
    }

    fn annotate(&mut self, records: &[&Record]) -> Result<Vec<Annotated>, AnnotateError> {
        let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
        let scores = self.score(&texts).map_err(|source| AnnotateError::Model {
            message: source.to_string(),
        })?;
        for (r, s) in records.iter().zip(&scores) {
            if s.truncated && self.stats.truncated_records.len() < 1000 {
                self.stats.truncated_records.push(r.id.clone());
            }
        }
        Ok(records
            .iter()
            .zip(&scores)
            .map(|(r, s)| Annotated::Parsed(self.annotation(r, s)))
            .collect())
    }

    fn batch_size(&self) -> usize {
        RECORDS_PER_PASS
    }

    fn use_memories(&mut self, memories: MemoryIndex) {
        self.set_memories(memories);
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or_default()
    }

    fn sensitive_detectors(&self) -> Vec<String> {
        match self.sensitive_thresholds {
            Some(_) => vec![
                "model".to_string(),
                format!("rules:{}", crate::annotate::sensitive::RULES_VERSION),
            ],
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_bounded_and_keeps_what_is_used_again() {
        let n = Generations::<u32>::GENERATION;
        let mut cache = Generations::<u32>::default();
        let key = |i: usize| text_key(&format!("text {i}"));
        for i in 0..3 * n {
            cache.insert(key(i), i as u32);
            if i % 1000 == 0 {
                // Text 0 is used again and again: it never ages out.
                assert_eq!(cache.get(&key(0)), Some(&0), "after {i} inserts");
            }
            assert!(cache.young.len() + cache.old.len() <= 2 * n);
        }
        assert_eq!(cache.get(&key(1)), None, "an unused entry ages out");
        assert_eq!(cache.get(&key(3 * n - 1)), Some(&(3 * n as u32 - 1)));
        assert_ne!(text_key("a"), text_key("b"));
    }
}
