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

/// The distinct texts of a batch, each once, with what is pooled for them.
#[derive(Default)]
struct DistinctTexts<'a> {
    /// Each distinct text, in order of first occurrence.
    texts: Vec<&'a str>,
    /// Per batch text: the index of its distinct text.
    text_index: Vec<usize>,
    /// Per distinct text: its sentences (not passages: person candidates
    /// read sentence-initial words off them).
    sentences: Vec<&'a [(usize, usize)]>,
    /// Per distinct text: the sentences pooled (none for one sentence).
    sentence_spans: Vec<Vec<(usize, usize)>>,
    /// Per distinct text: its registry names and aliases.
    linked: Vec<Vec<Linked>>,
    /// Per distinct text: its person-like candidates.
    candidates: Vec<Vec<Candidate>>,
    /// Per distinct text: every span pooled, sentences then candidates.
    pooled: Vec<Vec<(usize, usize)>>,
}

/// The heads on each distinct text's embedding.
struct RecordScores {
    tom_logits: Vec<Vec<f32>>,
    affect_logits: Vec<Vec<f32>>,
    intensity_logits: Vec<Vec<f32>>,
    /// Calibrated probabilities.
    tom_kind: Vec<Vec<f32>>,
    affect: Vec<Vec<f32>>,
    intensity: Vec<Vec<f32>>,
    /// The sensitive head's calibrated distribution (empty without it).
    sensitive: Vec<Vec<f32>>,
}

/// The heads on each pooled sentence.
struct SentenceScores {
    /// Per distinct text: the rows of its sentences.
    rows: Vec<Vec<usize>>,
    /// Per row: tom_kind logits.
    tom_logits: Vec<Vec<f32>>,
    /// Per row: P(sensitive) (empty without the sensitive head).
    sensitive: Vec<f32>,
    /// Per row: the sensitive head's most likely category (1 and up;
    /// empty without the head).
    sensitive_category: Vec<u8>,
}

/// What one encoder pass gave for the distinct texts of a batch.
struct PassScores {
    encoded: Encoded,
    record: RecordScores,
    sentences: SentenceScores,
    /// Per distinct text: P(person) of each candidate.
    person: Vec<Vec<f32>>,
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

    /// Probabilities and quote sentences for a batch of texts.
    ///
    /// One forward pass per distinct text: its embedding feeds the heads,
    /// and each of its sentences is scored on the mean of the text's own
    /// token states over the sentence ([`Encoder::encode_with_spans`]).
    /// Sentences past the encoder's window (long, truncated texts) are
    /// encoded on their own.
    ///
    /// A text scored earlier in the run (templated summaries repeat across
    /// a night) comes from the run's cache ([`ScoreCache`]): the scores are
    /// a function of the text alone, so it is not encoded again.
    pub fn score(&mut self, texts: &[&str]) -> Result<Vec<Scores>, tomlite_models::Error> {
        let keys: Vec<TextKey> = texts.iter().map(|t| text_key(t)).collect();
        let mut out: Vec<Option<Scores>> =
            keys.iter().map(|k| self.cache.get(k).cloned()).collect();
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        self.stats.texts_cached += (texts.len() - missing.len()) as u64;
        if !missing.is_empty() {
            let todo: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            let fresh = self.score_uncached(&todo)?;
            for (&i, scores) in missing.iter().zip(fresh) {
                self.cache.insert(keys[i], scores.clone());
                out[i] = Some(scores);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// [`Classifier::score`] without the cache.
    fn score_uncached(&mut self, texts: &[&str]) -> Result<Vec<Scores>, tomlite_models::Error> {
        let sentence_spans: Vec<Vec<(usize, usize)>> = texts.iter().map(|t| sentences(t)).collect();
        // Scored and quoted: sentences, long run-on ones cut into passages.
        let spans: Vec<Vec<(usize, usize)>> = texts
            .iter()
            .zip(&sentence_spans)
            .map(|(t, s)| passages_of(t, s))
            .collect();
        let batch = self.distinct_texts(texts, &sentence_spans, &spans);
        let encoded = self
            .encoder
            .encode_with_spans(&batch.texts, &batch.pooled)?;
        self.account(&encoded.stats, texts.len() - batch.texts.len());
        let late = self.encode_late_sentences(&batch, &encoded)?;
        let pass = PassScores {
            record: self.record_scores(&batch.texts, &encoded)?,
            sentences: self.sentence_scores(&batch, &encoded, &late)?,
            person: self.person_probabilities(&batch, &encoded)?,
            encoded,
        };
        Ok(batch
            .text_index
            .iter()
            .zip(&spans)
            .map(|(&distinct, text_sentences)| {
                self.scores_of(&batch, &pass, distinct, text_sentences)
            })
            .collect())
    }

    /// Every distinct text of `texts` once, with its sentences, registry
    /// names and person-like candidates, and the spans to pool for them
    /// (`spans`: its passages, [`crate::segment::passages_of`]).
    fn distinct_texts<'a>(
        &self,
        texts: &[&'a str],
        sentences: &'a [Vec<(usize, usize)>],
        spans: &'a [Vec<(usize, usize)>],
    ) -> DistinctTexts<'a> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut batch = DistinctTexts::default();
        for ((&text, text_sentences), true_sentences) in texts.iter().zip(spans).zip(sentences) {
            let distinct = *index.entry(text).or_insert_with(|| {
                batch.texts.push(text);
                batch.sentences.push(true_sentences);
                // A one-sentence text is its own quote: nothing to pool.
                batch.sentence_spans.push(if text_sentences.len() > 1 {
                    text_sentences.clone()
                } else {
                    Vec::new()
                });
                batch.texts.len() - 1
            });
            batch.text_index.push(distinct);
        }
        // Mentions: registry names, then person-like candidates around them,
        // pooled from the same pass as the sentences.
        batch.pooled = batch.sentence_spans.clone();
        for (distinct, text) in batch.texts.iter().enumerate() {
            let linked = self
                .linker
                .as_ref()
                .map(|linker| linker.link(text))
                .unwrap_or_default();
            let found = if self.heads.person.is_some() {
                let taken: Vec<(usize, usize)> = linked.iter().map(|m| (m.start, m.end)).collect();
                // Sentence-initial words: of the true sentences, not passages.
                candidates(text, batch.sentences[distinct], &taken)
            } else {
                Vec::new()
            };
            batch.pooled[distinct].extend(found.iter().map(|c| (c.start, c.end)));
            batch.linked.push(linked);
            batch.candidates.push(found);
        }
        batch
    }

    /// Vectors of the sentences the text's pass could not pool (outside
    /// the encoder's window), each encoded on its own, by (distinct text,
    /// sentence). Each distinct sentence is encoded once per run: long
    /// templated texts share them.
    fn encode_late_sentences(
        &mut self,
        batch: &DistinctTexts<'_>,
        encoded: &Encoded,
    ) -> Result<HashMap<(usize, usize), Vec<f32>>, tomlite_models::Error> {
        let mut late: Vec<&str> = Vec::new();
        let mut late_at: Vec<(usize, usize)> = Vec::new();
        for (distinct, vectors) in encoded.spans.iter().enumerate() {
            let sentence_spans = &batch.sentence_spans[distinct];
            for (k, v) in vectors.iter().enumerate().take(sentence_spans.len()) {
                if v.is_none() {
                    let (start, end) = sentence_spans[k];
                    late.push(&batch.texts[distinct][start..end]);
                    late_at.push((distinct, k));
                }
            }
        }
        let late_keys: Vec<TextKey> = late.iter().map(|t| text_key(t)).collect();
        let mut late_vectors: Vec<Option<Vec<f32>>> = late_keys
            .iter()
            .map(|key| self.sentence_cache.get(key).cloned())
            .collect();
        let mut todo: Vec<&str> = Vec::new();
        let mut todo_at: HashMap<TextKey, usize> = HashMap::new();
        for (k, (key, v)) in late_keys.iter().zip(&late_vectors).enumerate() {
            if v.is_none() && !todo_at.contains_key(key) {
                todo_at.insert(*key, todo.len());
                todo.push(late[k]);
            }
        }
        self.stats.texts_cached += (late.len() - todo.len()) as u64;
        if !todo.is_empty() {
            let fresh = self.encoder.encode(&todo)?;
            self.account(&fresh.stats, 0);
            for (key, &i) in &todo_at {
                self.sentence_cache
                    .insert(*key, fresh.embeddings[i].clone());
            }
            for (key, v) in late_keys.iter().zip(late_vectors.iter_mut()) {
                if v.is_none() {
                    *v = Some(fresh.embeddings[todo_at[key]].clone());
                }
            }
        }
        Ok(late_at
            .into_iter()
            .zip(late_vectors.into_iter().flatten())
            .collect())
    }

    /// The heads on each distinct text's embedding (`texts`, in the same
    /// order; a head trained with the wording cues reads them too): logits
    /// and calibrated probabilities.
    fn record_scores(
        &self,
        texts: &[&str],
        encoded: &Encoded,
    ) -> Result<RecordScores, tomlite_models::Error> {
        let x = Rows::from_vectors(&encoded.embeddings, self.encoder.dim())?;
        let heads = &self.heads;
        let read = |head: &tomlite_models::heads::Head| {
            head.logits_rows(&*head_input(&x, texts, head.spec.wording_cues)?)
        };
        let tom_logits = read(&heads.tom_kind)?;
        let affect_logits = read(&heads.affect)?;
        let intensity_logits = read(&heads.intensity)?;
        let sensitive = match &heads.sensitive {
            Some(head) => head
                .logits_rows(&x)?
                .iter()
                .map(|z| to_f32(softmax_t(z, head.temperature)))
                .collect(),
            None => vec![Vec::new(); encoded.embeddings.len()],
        };
        let tom_temperature = heads.tom_kind.temperature;
        let softmax = |logits: &[Vec<f32>], temperature: f64| -> Vec<Vec<f32>> {
            logits
                .iter()
                .map(|z| to_f32(softmax_t(z, temperature)))
                .collect()
        };
        Ok(RecordScores {
            tom_kind: tom_logits
                .iter()
                .map(|z| {
                    z.iter()
                        .map(|&v| sigmoid_t(v, tom_temperature) as f32)
                        .collect()
                })
                .collect(),
            affect: softmax(&affect_logits, heads.affect.temperature),
            intensity: softmax(&intensity_logits, heads.intensity.temperature),
            tom_logits,
            affect_logits,
            intensity_logits,
            sensitive,
        })
    }

    /// tom_kind logits and P(sensitive) of every pooled sentence, in
    /// (text, sentence) order; a sentence without a vector reads zeros.
    fn sentence_scores(
        &self,
        batch: &DistinctTexts<'_>,
        encoded: &Encoded,
        late: &HashMap<(usize, usize), Vec<f32>>,
    ) -> Result<SentenceScores, tomlite_models::Error> {
        let dim = self.encoder.dim();
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); batch.texts.len()];
        let mut flat: Vec<f32> = Vec::new();
        let mut count = 0usize;
        let zero = vec![0f32; dim];
        for (distinct, vectors) in encoded.spans.iter().enumerate() {
            let sentences = batch.sentence_spans[distinct].len();
            for (k, v) in vectors.iter().enumerate().take(sentences) {
                let v = v
                    .as_ref()
                    .or_else(|| late.get(&(distinct, k)))
                    .unwrap_or(&zero);
                flat.extend_from_slice(v);
                rows[distinct].push(count);
                count += 1;
            }
        }
        if count == 0 {
            return Ok(SentenceScores {
                rows,
                tom_logits: Vec::new(),
                sensitive: Vec::new(),
                sensitive_category: Vec::new(),
            });
        }
        let x = Rows::new(flat, dim)?;
        let (sensitive, sensitive_category): (Vec<f32>, Vec<u8>) = match &self.heads.sensitive {
            Some(head) => head
                .logits_rows(&x)?
                .iter()
                .map(|z| {
                    let p = softmax_t(z, head.temperature);
                    let category = crate::annotate::sensitive::most_likely_category(&p);
                    ((1.0 - p[0]) as f32, category as u8)
                })
                .unzip(),
            None => (Vec::new(), Vec::new()),
        };
        Ok(SentenceScores {
            rows,
            tom_logits: self.heads.tom_kind.logits_rows(&x)?,
            sensitive,
            sensitive_category,
        })
    }

    /// P(person) of every candidate, per distinct text: its words in
    /// context and its shape. Empty without a person head.
    fn person_probabilities(
        &self,
        batch: &DistinctTexts<'_>,
        encoded: &Encoded,
    ) -> Result<Vec<Vec<f32>>, tomlite_models::Error> {
        let mut person_p: Vec<Vec<f32>> = vec![Vec::new(); batch.texts.len()];
        let Some(head) = &self.heads.person else {
            return Ok(person_p);
        };
        let dim = self.encoder.dim();
        let mut rows: Vec<f32> = Vec::new();
        for (distinct, found) in batch.candidates.iter().enumerate() {
            let vectors = encoded.spans.get(distinct).map_or(&[][..], |v| &v[..]);
            let first = batch.sentence_spans[distinct].len();
            for (k, candidate) in found.iter().enumerate() {
                match vectors.get(first + k).and_then(Option::as_ref) {
                    Some(v) => rows.extend_from_slice(v),
                    None => rows.extend(std::iter::repeat_n(0f32, dim)),
                }
                rows.extend_from_slice(&candidate.features());
            }
        }
        if rows.is_empty() {
            return Ok(person_p);
        }
        let logits = head.logits_rows(&Rows::new(rows, dim + CANDIDATE_FEATURES)?)?;
        let mut logits = logits.into_iter();
        for (distinct, found) in batch.candidates.iter().enumerate() {
            for _ in found {
                let z = logits.next().map_or(0.0, |row| row[0]);
                person_p[distinct].push(sigmoid_t(z, head.temperature) as f32);
            }
        }
        Ok(person_p)
    }

    /// The scores of one text (`distinct` in the batch; its sentences
    /// `text_sentences`) from what the pass computed.
    fn scores_of(
        &self,
        batch: &DistinctTexts<'_>,
        pass: &PassScores,
        distinct: usize,
        text_sentences: &[(usize, usize)],
    ) -> Scores {
        let rows = &pass.sentences.rows[distinct];
        let record = &pass.record;
        let sensitive = &record.sensitive[distinct];
        Scores {
            embedding: pass.encoded.embeddings[distinct].clone(),
            sentences: text_sentences.to_vec(),
            sentence_kinds: self.sentence_kinds(pass, distinct, text_sentences),
            linked: batch.linked[distinct].clone(),
            unknown: batch.candidates[distinct]
                .iter()
                .cloned()
                .zip(pass.person[distinct].iter().copied())
                .collect(),
            logits: [
                record.tom_logits[distinct].clone(),
                record.affect_logits[distinct].clone(),
                record.intensity_logits[distinct].clone(),
            ],
            truncated: pass.encoded.stats.truncated.contains(&distinct),
            tom_kind: record.tom_kind[distinct].clone(),
            affect: record.affect[distinct].clone(),
            intensity: record.intensity[distinct].clone(),
            quotes: self.quotes(batch, pass, distinct, text_sentences),
            sentence_sensitive: if sensitive.is_empty() {
                Vec::new()
            } else if rows.is_empty() {
                // One sentence: the record's own P(sensitive).
                vec![1.0 - sensitive[0]; text_sentences.len().min(1)]
            } else {
                rows.iter()
                    .map(|&r| pass.sentences.sensitive.get(r).copied().unwrap_or(0.0))
                    .collect()
            },
            sentence_sensitive_category: if sensitive.is_empty() {
                Vec::new()
            } else {
                rows.iter()
                    .map(|&r| {
                        pass.sentences
                            .sensitive_category
                            .get(r)
                            .copied()
                            .unwrap_or(0)
                    })
                    .collect()
            },
            sensitive_lexical: match &self.heads.sensitive_lexical {
                Some(m) if !sensitive.is_empty() => {
                    crate::annotate::sensitive::lexical_probabilities(
                        m,
                        batch.texts[distinct],
                        text_sentences,
                    )
                    .into_iter()
                    .map(|p| p as f32)
                    .collect()
                }
                _ => Vec::new(),
            },
            sensitive: sensitive.clone(),
        }
    }

    /// Per tom_kind, the sentence whose logit of that kind is highest; a
    /// text of one sentence (or none) is its own quote.
    fn quotes(
        &self,
        batch: &DistinctTexts<'_>,
        pass: &PassScores,
        distinct: usize,
        text_sentences: &[(usize, usize)],
    ) -> Vec<(usize, usize)> {
        let rows = &pass.sentences.rows[distinct];
        let logits = &pass.sentences.tom_logits;
        (0..self.heads.tom_kind.spec.labels.len())
            .map(|kind| {
                if rows.is_empty() {
                    return text_sentences.first().copied().unwrap_or((0, 0));
                }
                rows.iter()
                    .zip(&batch.sentence_spans[distinct])
                    .max_by(|a, b| logits[*a.0][kind].total_cmp(&logits[*b.0][kind]))
                    .map_or((0, 0), |(_, &span)| span)
            })
            .collect()
    }

    /// Per sentence of the text, its most likely tom_kind (the text's own
    /// for a text of one sentence).
    fn sentence_kinds(
        &self,
        pass: &PassScores,
        distinct: usize,
        text_sentences: &[(usize, usize)],
    ) -> Vec<(usize, f32)> {
        let rows = &pass.sentences.rows[distinct];
        if rows.is_empty() {
            return text_sentences
                .iter()
                .map(|_| argmax(&pass.record.tom_kind[distinct]))
                .collect();
        }
        let temperature = self.heads.tom_kind.temperature;
        rows.iter()
            .map(|&r| {
                let p: Vec<f32> = pass.sentences.tom_logits[r]
                    .iter()
                    .map(|&v| sigmoid_t(v, temperature) as f32)
                    .collect();
                argmax(&p)
            })
            .collect()
    }

    fn account(&mut self, s: &EncodeStats, deduplicated: usize) {
        self.stats.texts_encoded += s.token_counts.len() as u64;
        self.stats.texts_deduplicated += deduplicated as u64;
        self.stats.tokens += s.tokens as u64;
        self.stats.padded_tokens += s.padded_tokens as u64;
        self.stats.truncated_texts += s.truncated.len() as u64;
    }

    /// Turns one record's scores into an annotation.
    pub fn annotation(&self, record: &Record, s: &Scores) -> Annotation {
        let text = record.text.as_str();
        let labels = &self.heads.tom_kind.spec.labels;
        let mut order: Vec<usize> = (0..s.tom_kind.len()).collect();
        order.sort_by(|&a, &b| s.tom_kind[b].total_cmp(&s.tom_kind[a]));
        // Each tag's confidence is P(tag right): from the card's tag
        // calibration when it has one, else the kind's own probability.
        let p = |k: usize| f64::from(s.tom_kind[k]);
        let cal = self.heads.card.tag_calibration.as_ref();
        let mut best = order.first().map(|&k| (labels[k].clone(), p(k)));
        let mut tags: Vec<(usize, f64)> = Vec::new();
        if let [k0, k1, ..] = order[..] {
            let c0 = cal.map_or(p(k0), |c| c.primary(p(k0), p(k1)));
            best = Some((labels[k0].clone(), c0));
            if c0 >= self.abstain_below {
                tags.push((k0, c0));
                let c1 = cal.map_or(p(k1), |c| c.secondary(p(k1), p(k0)));
                if c1 >= f64::from(SECOND_KIND_MIN) {
                    tags.push((k1, c1));
                }
            }
        } else if let [k0] = order[..]
            && p(k0) >= self.abstain_below
        {
            tags.push((k0, p(k0)));
        }
        let (ai, ac) = argmax(&s.affect);
        let (ii, ic) = argmax(&s.intensity);
        let edges = self.edges(record, s, &tags);
        Annotation {
            annotator: Some(self.id.clone()),
            tags: tags
                .iter()
                .map(|&(k, c)| {
                    let (qs, qe) = s.quotes[k];
                    TagCandidate {
                        tom_kind: Some(labels[k].clone()),
                        confidence: Some(round4(c)),
                        quote: Quote {
                            text: Some(text[qs..qe].to_string()),
                            start: Some(qs as u64),
                            end: Some(qe as u64),
                        },
                        problems: Vec::new(),
                    }
                })
                .collect(),
            affect: vec![Scored {
                label: Some(self.heads.affect.spec.labels[ai].clone()),
                confidence: Some(round4(f64::from(ac))),
                problems: Vec::new(),
            }],
            intensity: vec![Scored {
                label: Some(self.heads.intensity.spec.labels[ii].clone()),
                confidence: Some(round4(f64::from(ic))),
                problems: Vec::new(),
            }],
            edges,
            best: if tags.is_empty() {
                best.map(|(k, p)| (k, round4(p)))
            } else {
                None
            },
            embedding: Some(quantize(&s.embedding)),
            read_as: None,
            sensitive: self.detect_sensitive(text, s),
        }
    }

    /// Edge candidates of one record: its registry mentions, its unknown
    /// person-like names, and a link to its most similar earlier memory
    /// when it is tagged goal or unresolved_thread. Source is always
    /// `memory:<record id>`; one edge per target (its surest mention).
    fn edges(&self, record: &Record, scores: &Scores, tags: &[(usize, f64)]) -> Vec<EdgeCandidate> {
        let Some(calibration) = self.heads.card.edges.as_ref() else {
            return Vec::new();
        };
        let mut edges = RecordEdges {
            text: record.text.as_str(),
            source: format!("memory:{}", record.id),
            scores,
            tags,
            labels: &self.heads.tom_kind.spec.labels,
            calibration,
            by_target: Vec::new(),
        };
        // Every linked mention is proposed, however weak its relation: the
        // policy quarantines a weak one (`confidence_below_threshold`, its
        // confidence kept for the curator's queue) and counts it towards
        // `max_edges_per_record`. So are unknown people whose P(person)
        // reaches `person_min` (the curator adds the node), and a memory
        // link whose cosine reaches `memory_min_cosine`.
        if let Some(linker) = &self.linker {
            edges.linked_mentions(linker);
        }
        edges.unknown_people();
        // A goal or an unresolved thread: its most similar earlier memory.
        if let Some(&(kind, confidence)) = tags
            .iter()
            .find(|(kind, _)| MEMORY_LINK_KINDS.contains(&edges.labels[*kind].as_str()))
            && let Some((memory_id, cosine)) = self.nearest_earlier_memory(record, scores)
            && f64::from(cosine) >= calibration.memory_min_cosine
        {
            edges.memory_link(kind, confidence, memory_id, cosine);
        }
        edges.by_target.into_iter().map(|(_, edge)| edge).collect()
    }

    /// The memory of the record's persona most similar to it, among those
    /// committed before it (the record itself excluded).
    fn nearest_earlier_memory(&self, record: &Record, scores: &Scores) -> Option<(&str, f32)> {
        self.memories
            .nearest(&record.persona_id, &scores.embedding, |id| {
                id == record.id
                    || self.memory_times.as_ref().is_some_and(|times| {
                        times
                            .get(id)
                            .is_none_or(|created_at| *created_at >= record.created_at)
                    })
            })
    }
}

/// The edge candidates of one record while they are gathered: one per
/// target, the surest kept.
struct RecordEdges<'a> {
    text: &'a str,
    /// `memory:<record id>`.
    source: String,
    scores: &'a Scores,
    tags: &'a [(usize, f64)],
    /// The tom_kind labels, in the heads' order.
    labels: &'a [String],
    calibration: &'a EdgeCalibration,
    /// Target key (node id, `?<folded name>`, `memory:<id>`) → its edge.
    by_target: Vec<(String, EdgeCandidate)>,
}

impl RecordEdges<'_> {
    /// The sentence holding byte `pos` (the first when none does).
    fn sentence_of(&self, pos: usize) -> usize {
        self.scores
            .sentences
            .iter()
            .position(|&(start, end)| start <= pos && pos < end)
            .unwrap_or(0)
    }

    /// The kind the classifier gives a sentence: the tag's, when a tag
    /// quotes it; else the sentence's own most likely kind.
    fn kind_of(&self, sentence: usize) -> (usize, f64) {
        let span = self.scores.sentences.get(sentence).copied();
        self.tags
            .iter()
            .find(|(kind, _)| Some(self.scores.quotes[*kind]) == span)
            .map(|&(kind, confidence)| (kind, confidence))
            .unwrap_or_else(|| {
                self.scores
                    .sentence_kinds
                    .get(sentence)
                    .map_or((0, 0.0), |&(kind, p)| (kind, f64::from(p)))
            })
    }

    /// Keeps `edge` for `target` unless an edge as sure already has it.
    fn keep(&mut self, target: String, edge: EdgeCandidate) {
        match self.by_target.iter_mut().find(|(key, _)| *key == target) {
            Some((_, old)) if old.confidence >= edge.confidence => {}
            Some((_, old)) => *old = edge,
            None => self.by_target.push((target, edge)),
        }
    }

    /// An edge quoting the byte span `(start, end)` of the text.
    fn edge_quoting(
        &self,
        (start, end): (usize, usize),
        relation: usize,
        target_node: Option<String>,
        target_mention: Option<String>,
        confidence: f64,
    ) -> EdgeCandidate {
        EdgeCandidate {
            source_node: Some(self.source.clone()),
            relation: Some(self.labels[relation].clone()),
            target_node,
            target_mention,
            confidence: Some(round4(confidence)),
            quote: Quote {
                text: Some(self.text[start..end].to_string()),
                start: Some(start as u64),
                end: Some(end as u64),
            },
            problems: Vec::new(),
        }
    }

    /// A mention's edge: it quotes the mention's sentence (the whole text
    /// when there is none), with that sentence's kind.
    fn mention_edge(
        &self,
        sentence: usize,
        target_node: Option<String>,
        mention: &str,
        confidence: f64,
    ) -> EdgeCandidate {
        let span = (self.scores.sentences.get(sentence).copied()).unwrap_or((0, self.text.len()));
        let relation = self.kind_of(sentence).0;
        self.edge_quoting(
            span,
            relation,
            target_node,
            Some(mention.to_string()),
            confidence,
        )
    }

    /// One edge per registry node the text names.
    fn linked_mentions(&mut self, linker: &Linker) {
        let scores = self.scores;
        for linked in &scores.linked {
            let sentence = self.sentence_of(linked.start);
            let p_kind = self.kind_of(sentence).1;
            // A doubtful link (another case) or relation shows in its low
            // confidence.
            let p_link = if linked.exact_case {
                self.calibration.link_exact_case
            } else {
                self.calibration.link_other_case
            };
            let node = &linker.nodes()[linked.node].id;
            let mention = &self.text[linked.start..linked.end];
            let confidence = self.calibration.mention(p_link, p_kind);
            let edge = self.mention_edge(sentence, Some(node.clone()), mention, confidence);
            self.keep(node.clone(), edge);
        }
    }

    /// One edge per unknown person-like name whose P(person) reaches
    /// `person_min`, with no target node.
    fn unknown_people(&mut self) {
        let scores = self.scores;
        for (candidate, p_person) in &scores.unknown {
            if f64::from(*p_person) < self.calibration.person_min {
                continue;
            }
            let sentence = self.sentence_of(candidate.start);
            let p_kind = self.kind_of(sentence).1;
            let mention = &self.text[candidate.start..candidate.end];
            let confidence = self.calibration.mention(f64::from(*p_person), p_kind);
            let edge = self.mention_edge(sentence, None, mention, confidence);
            self.keep(format!("?{}", fold(mention)), edge);
        }
    }

    /// The edge of a `kind` tag (with its confidence) to the earlier memory
    /// `memory_id`, quoting the tag's sentence.
    fn memory_link(&mut self, kind: usize, confidence: f64, memory_id: &str, cosine: f32) {
        let target = format!("memory:{memory_id}");
        let confidence = self.calibration.memory(f64::from(cosine), confidence);
        let edge = self.edge_quoting(
            self.scores.quotes[kind],
            kind,
            Some(target.clone()),
            None,
            confidence,
        );
        self.keep(target, edge);
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
