//! Scoring: one encoder pass over a batch's distinct texts, the heads on
//! each text and each sentence, and the person candidates' P.

use super::*;

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

    pub(super) fn account(&mut self, s: &EncodeStats, deduplicated: usize) {
        self.stats.texts_encoded += s.token_counts.len() as u64;
        self.stats.texts_deduplicated += deduplicated as u64;
        self.stats.tokens += s.tokens as u64;
        self.stats.padded_tokens += s.padded_tokens as u64;
        self.stats.truncated_texts += s.truncated.len() as u64;
    }
}
