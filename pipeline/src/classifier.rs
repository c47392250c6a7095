//! The local classifier: the MiniLM encoder plus the trained heads, as an
//! [`Annotator`]. It is the default annotator of `tomlite run`.
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
use tomlite_models::heads::Heads;
use tomlite_models::metrics::{argmax, sigmoid_t, softmax_t};
use tomlite_models::{EncodeStats, Encoder};

use crate::annotation::{
    AnnotateError, Annotated, Annotation, Annotator, AnnotatorInfo, Quote, Scored, TagCandidate,
};
use crate::record::{Record, truncate};
use crate::segment::sentences;

/// Records the classifier scores per pass: enough that sorting texts by
/// length leaves almost no padding in the encoder's batches.
pub const RECORDS_PER_PASS: usize = 1024;

/// A second tom_kind is tagged only when its probability reaches this.
pub const SECOND_KIND_MIN: f32 = 0.5;

/// Where the encoder and the heads live, relative to the repository.
pub const DEFAULT_MODEL_DIR: &str = "models/artifacts/all-MiniLM-L6-v2";
/// Where the trained heads live, relative to the repository.
pub const DEFAULT_HEADS_DIR: &str = "models/artifacts/heads";

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
    sha256: String,
    digest: tomlite_staging::Digest,
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
}

fn to_f32(v: Vec<f64>) -> Vec<f32> {
    v.into_iter().map(|x| x as f32).collect()
}

impl Classifier {
    /// Loads the encoder from `model_dir` and the heads from `heads_dir`.
    pub fn load(
        model_dir: &Path,
        heads_dir: &Path,
        abstain_below: f64,
    ) -> Result<Self, ClassifierError> {
        let encoder = Encoder::load(model_dir).map_err(|source| ClassifierError::Load {
            dir: model_dir.to_path_buf(),
            source: Box::new(source),
        })?;
        let heads = Heads::load(heads_dir).map_err(|source| ClassifierError::Load {
            dir: heads_dir.to_path_buf(),
            source: Box::new(source),
        })?;
        if heads.card.encoder_sha256 != encoder.sha256() {
            return Err(ClassifierError::EncoderMismatch {
                dir: heads_dir.to_path_buf(),
                expected: heads.card.encoder_sha256.clone(),
                found: encoder.sha256().to_string(),
            });
        }
        let heads_sha = crate::sha256_file(&heads_dir.join(tomlite_models::heads::HEADS_FILE))
            .unwrap_or_default();
        let mut h = Sha256::new();
        h.update(encoder.sha256().as_bytes());
        h.update(heads_sha.as_bytes());
        h.update(abstain_below.to_le_bytes());
        h.update(SECOND_KIND_MIN.to_le_bytes());
        let sha256 = hex::encode(h.finalize());
        Ok(Self {
            id: format!("minilm-l6+heads@{}", &sha256[..12]),
            digest: truncate(&hex::decode(&sha256).unwrap_or_default()),
            sha256,
            encoder,
            heads,
            abstain_below,
            stats: ClassifierStats::default(),
        })
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
    pub fn score(&mut self, texts: &[&str]) -> Result<Vec<Scores>, tomlite_models::Error> {
        let spans: Vec<Vec<(usize, usize)>> = texts.iter().map(|t| sentences(t)).collect();
        // Every distinct text once.
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut unique: Vec<&str> = Vec::new();
        let mut unique_spans: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut text_ix = Vec::with_capacity(texts.len());
        for (t, sp) in texts.iter().zip(&spans) {
            text_ix.push(*index.entry(t).or_insert_with(|| {
                unique.push(t);
                // A one-sentence text is its own quote: nothing to pool.
                unique_spans.push(if sp.len() > 1 { sp.clone() } else { Vec::new() });
                unique.len() - 1
            }));
        }
        let encoded = self.encoder.encode_with_spans(&unique, &unique_spans)?;
        self.account(&encoded.stats, texts.len() - unique.len());

        // Sentences outside the window: encode them on their own.
        let mut late: Vec<&str> = Vec::new();
        let mut late_ix: Vec<(usize, usize)> = Vec::new();
        for (u, vectors) in encoded.spans.iter().enumerate() {
            for (k, v) in vectors.iter().enumerate() {
                if v.is_none() {
                    let (s, e) = unique_spans[u][k];
                    late.push(&unique[u][s..e]);
                    late_ix.push((u, k));
                }
            }
        }
        let late_vectors = if late.is_empty() {
            Vec::new()
        } else {
            let e = self.encoder.encode(&late)?;
            self.account(&e.stats, 0);
            e.embeddings
        };

        let dim = self.encoder.dim();
        let flat: Vec<f32> = encoded.embeddings.iter().flatten().copied().collect();
        let x = candle_core::Tensor::from_vec(flat, (unique.len(), dim), &candle_core::Device::Cpu)
            .map_err(tomlite_models::Error::from)?;
        let tom_logits = self.heads.tom_kind.logits_rows(&x)?;
        let aff_logits = self.heads.affect.logits_rows(&x)?;
        let int_logits = self.heads.intensity.logits_rows(&x)?;

        // tom_kind logits of every pooled sentence, in (text, sentence) order.
        let mut sentence_rows: Vec<Vec<usize>> = vec![Vec::new(); unique.len()];
        let mut flat_sent: Vec<f32> = Vec::new();
        let mut n_sent = 0usize;
        let late_map: HashMap<(usize, usize), &Vec<f32>> =
            late_ix.iter().copied().zip(&late_vectors).collect();
        let zero = vec![0f32; dim];
        for (u, vectors) in encoded.spans.iter().enumerate() {
            for (k, v) in vectors.iter().enumerate() {
                let v = v
                    .as_ref()
                    .or_else(|| late_map.get(&(u, k)).copied())
                    .unwrap_or(&zero);
                flat_sent.extend_from_slice(v);
                sentence_rows[u].push(n_sent);
                n_sent += 1;
            }
        }
        let sent_logits = if n_sent == 0 {
            Vec::new()
        } else {
            let xs =
                candle_core::Tensor::from_vec(flat_sent, (n_sent, dim), &candle_core::Device::Cpu)
                    .map_err(tomlite_models::Error::from)?;
            self.heads.tom_kind.logits_rows(&xs)?
        };
        let (tt, at, it) = (
            self.heads.tom_kind.temperature,
            self.heads.affect.temperature,
            self.heads.intensity.temperature,
        );
        let tom: Vec<Vec<f32>> = tom_logits
            .iter()
            .map(|z| z.iter().map(|&v| sigmoid_t(v, tt) as f32).collect())
            .collect();
        let affect: Vec<Vec<f32>> = aff_logits
            .iter()
            .map(|z| to_f32(softmax_t(z, at)))
            .collect();
        let intensity: Vec<Vec<f32>> = int_logits
            .iter()
            .map(|z| to_f32(softmax_t(z, it)))
            .collect();
        let kinds = self.heads.tom_kind.spec.labels.len();
        Ok(text_ix
            .iter()
            .zip(&spans)
            .map(|(&ti, sp)| {
                let rows = &sentence_rows[ti];
                let quotes = (0..kinds)
                    .map(|k| {
                        if rows.is_empty() {
                            // One sentence (or none): it is the quote.
                            return sp.first().copied().unwrap_or((0, 0));
                        }
                        rows.iter()
                            .zip(&unique_spans[ti])
                            .max_by(|a, b| sent_logits[*a.0][k].total_cmp(&sent_logits[*b.0][k]))
                            .map_or((0, 0), |(_, &span)| span)
                    })
                    .collect();
                Scores {
                    logits: [
                        tom_logits[ti].clone(),
                        aff_logits[ti].clone(),
                        int_logits[ti].clone(),
                    ],
                    truncated: encoded.stats.truncated.contains(&ti),
                    tom_kind: tom[ti].clone(),
                    affect: affect[ti].clone(),
                    intensity: intensity[ti].clone(),
                    quotes,
                }
            })
            .collect())
    }

    fn account(&mut self, s: &EncodeStats, deduplicated: usize) {
        self.stats.texts_encoded += s.token_counts.len() as u64;
        self.stats.texts_deduplicated += deduplicated as u64;
        self.stats.tokens += s.tokens as u64;
        self.stats.padded_tokens += s.padded_tokens as u64;
        self.stats.truncated_texts += s.truncated.len() as u64;
    }

    /// Turns one record's scores into an annotation.
    pub fn annotation(&self, record_id: &str, text: &str, s: &Scores) -> Annotation {
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
        let _ = record_id;
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
            edges: Vec::new(),
            best: if tags.is_empty() {
                best.map(|(k, p)| (k, round4(p)))
            } else {
                None
            },
        }
    }
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
            .map(|(r, s)| Annotated::Parsed(self.annotation(&r.id, &r.text, s)))
            .collect())
    }

    fn batch_size(&self) -> usize {
        RECORDS_PER_PASS
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or_default()
    }
}
