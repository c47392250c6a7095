//! Training and measuring the sensitive-content head: the labeled data
//! (`data/sensitivity`), its held-out styles, the head's fit and
//! calibration, and `tomlite eval --sensitivity`.

use std::path::PathBuf;

use serde_json::{Value, json};
use tomlite_models::data::{SensitivityRecord, read_sensitivity};
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::lexical::{Concepts, Lexical, LexicalOptions};
use tomlite_models::metrics::{ece, fit_temperature_softmax, softmax_t};
use tomlite_models::{Encoder, Rows};

use crate::error::LearnError;
use crate::trade_off::{ratio, trade_off};
use tomlite_core::annotate::classifier::Classifier;
use tomlite_core::annotate::sensitive::{
    DEFAULT_THRESHOLD, labels, lexical_probabilities, reads_whole_text, round4,
};
use tomlite_core::vocab::SENSITIVE_CATEGORIES;

/// Styles of `data/sensitivity` held out of training, for the dev split:
/// memories told in the third person, long journals with the line buried
/// mid-text, and transcribed voice memos (run-on, fillers, little
/// punctuation).
pub const SENSITIVE_HELD_OUT_STYLES: [&str; 3] =
    ["third_person_memory", "rambling_journal", "voice_memo"];

/// Whether a sensitivity record belongs to the dev split.
pub fn is_held_out(r: &SensitivityRecord) -> bool {
    r.style
        .as_deref()
        .is_some_and(|s| SENSITIVE_HELD_OUT_STYLES.contains(&s))
}

/// Words that may mark sensitive content: a ToM-lite training record
/// (labeled for ToM-lite, not for sensitivity) that has none of them is
/// taken as a weak negative for the sensitive head, so that the head sees
/// ordinary memories as well as the hard controls of `data/sensitivity`;
/// one that has any is left out of the head's training (it may be
/// sensitive). This is a training-data filter, not a detector.
const MAYBE_SENSITIVE: &str = r"(?i)therap|psychiatr|counsel|antidepress|medicat|\bmeds\b|diagnos|cancer|chemo|tumou?r|biopsy|surgery|operation|hospital|clinic|pregnan|miscarr|\bivf\b|depress|suicid|self.harm|overdose|abus|assault|violen|police|arrest|court|lawyer|solicitor|custody|divorc|\bvisa\b|immigra|deport|debt|loan|overdraft|bankrupt|evict|arrears|gambl|salary|password|\bpin\b|account number|\bsex|\bstds?\b|\bstis?\b|\bgay\b|lesbian|\btrans\b|queer|coming out|came out|religio|mosque|synagogue|temple|faith|pray|secret|don't tell|nobody knows|confided|illness|disease|insulin|diabet|adhd|autis|rehab|sober|alcohol|drunk|drugs|addict|grief|funeral|died|death|dying|panic attack|eating disorder|anorex|bulim|harass|stalk|threat|affair|cheat|porn|nude|condom|contracep|\bhiv\b|herpes|disabilit|mental health|breakdown|burnout|prescri|\bgp\b|doctor|nurse";

/// Whether `text` has a word of `MAYBE_SENSITIVE`.
pub fn may_be_sensitive(text: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| regex::Regex::new(MAYBE_SENSITIVE).expect("a valid pattern"))
        .is_match(text)
}

/// Words of each sensitive category (`sensitive_lexicon.json`): the
/// lexical model's word lists, one feature per category, so that a word no
/// training record holds ("epilepsy", "insolvency") still counts as its
/// category's. Written from the categories' definitions alone, not from
/// the labeled records; stored in the fitted model, so changing it
/// changes the model (and the annotator id) only when the heads are
/// trained again.
const SENSITIVE_LEXICON: &str = include_str!("sensitive_lexicon.json");

/// [`SENSITIVE_LEXICON`] as word lists, in [`SENSITIVE_CATEGORIES`]'s
/// order.
///
/// # Errors
/// The file does not parse, names a category outside the vocabulary or
/// misses one, or has an entry that is not one lower-case word.
pub fn sensitive_concepts() -> Result<Concepts, LearnError> {
    concepts_from(SENSITIVE_LEXICON)
}

fn concepts_from(json: &str) -> Result<Concepts, LearnError> {
    let invalid = |reason: String| {
        LearnError::from(tomlite_models::Error::InvalidOptions {
            reason: format!("sensitive_lexicon.json: {reason}"),
        })
    };
    let mut lists: std::collections::BTreeMap<String, Vec<String>> =
        serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    if let Some(other) = lists
        .keys()
        .find(|k| !SENSITIVE_CATEGORIES.contains(&k.as_str()))
    {
        return Err(invalid(format!("{other:?} is not a sensitive category")));
    }
    let ordered = SENSITIVE_CATEGORIES
        .iter()
        .map(|c| {
            lists
                .remove(*c)
                .map(|words| (c.to_string(), words))
                .ok_or_else(|| invalid(format!("category {c:?} is missing")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Concepts::new(ordered).map_err(|e| match e {
        tomlite_models::Error::InvalidOptions { reason } => invalid(reason),
        other => other.into(),
    })
}

/// Reads every sensitivity file, the file's path with each record.
pub fn read_all(files: &[PathBuf]) -> Result<Vec<SensitivityRecord>, LearnError> {
    let mut out = Vec::new();
    for f in files {
        out.extend(read_sensitivity(f)?);
    }
    Ok(out)
}

/// The label index of a record (0: not sensitive, else 1 + its category),
/// `None` for a category outside the vocabulary.
pub fn label_index(r: &SensitivityRecord) -> Option<usize> {
    if !r.sensitivity.sensitive {
        return Some(0);
    }
    let c = r.sensitivity.category.as_deref()?;
    SENSITIVE_CATEGORIES
        .iter()
        .position(|k| *k == c)
        .map(|i| i + 1)
}

/// The label index of a record: 0 for not sensitive, else 1 + its category.
fn label_of(r: &SensitivityRecord, path: &str) -> Result<usize, LearnError> {
    label_index(r).ok_or_else(|| LearnError::Label {
        path: path.to_string(),
        id: r.id.clone(),
        field: "sensitivity.category",
        label: r.sensitivity.category.clone().unwrap_or_default(),
    })
}

/// What training the head gives back.
pub struct Trained {
    /// The head, its temperature fitted out of bag.
    pub head: Head,
    /// The lexical model the detector averages with the head.
    pub lexical: Lexical,
    /// Figures for the card: out-of-bag and dev.
    pub metrics: Value,
}

/// Trains the sensitive head on the training styles of `records`: each
/// record's vector, and for a sensitive record its quote's in-context
/// vector too (the classifier scores sentences with the same head),
/// class-weighted, bagged; the temperature is fitted on the out-of-bag
/// logits of the records `unseen` says the encoder was not trained on.
/// `None` when there are no records.
pub fn train_head(
    encoder: &Encoder,
    records: &[SensitivityRecord],
    negatives: &[&str],
    unseen: &dyn Fn(&SensitivityRecord) -> bool,
    source: &str,
    opts: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Trained>, LearnError> {
    let (dev, train): (Vec<&SensitivityRecord>, Vec<&SensitivityRecord>) =
        records.iter().partition(|r| is_held_out(r));
    if train.is_empty() {
        return Ok(None);
    }
    let TrainingRows {
        x,
        labels,
        group,
        is_record,
        lexical: (lexical_texts, lexical_labels),
        lexical_group,
        record_labels,
        readings,
    } = training_rows(encoder, &train, negatives, source)?;
    let lexical_opts = LexicalOptions {
        concepts: sensitive_concepts()?,
        ..LexicalOptions::default()
    };
    let lexical = Lexical::train(
        &lexical_texts.iter().map(String::as_str).collect::<Vec<_>>(),
        &lexical_labels,
        &lexical_opts,
    )?;
    let spec = HeadSpec {
        wording_cues: false,
        name: "sensitive".into(),
        labels: self::labels(),
        multi_label: false,
        hidden: 0,
    };
    let weights = crate::bagging::class_weights(&labels, spec.labels.len());
    let targets = Targets::Single {
        labels: labels.iter().map(|&l| l as u32).collect(),
        weights,
    };
    let bag = crate::bagging::train_bagged(&spec, &x, &targets, &group, opts, |_, _, _| {})?;
    let mut head = bag.head;
    let oob_rows: Vec<usize> = (0..labels.len())
        .filter(|&i| is_record[i] && unseen(train[group[i]]) && bag.oob[i].is_some())
        .collect();
    let oob: Vec<Vec<f32>> = oob_rows
        .iter()
        .filter_map(|&i| bag.oob[i].clone())
        .collect();
    let gold: Vec<usize> = oob_rows.iter().map(|&i| labels[i]).collect();
    head.temperature = fit_temperature_softmax(&oob, &gold);
    let folds = crate::style_cv::Folds {
        records: &train,
        record_labels: &record_labels,
        x: &x,
        labels: &labels,
        group: &group,
        lexical_texts: &lexical_texts,
        lexical_labels: &lexical_labels,
        lexical_group: &lexical_group,
        readings: &readings,
    };
    let scored = crate::style_cv::cross_validate(
        &folds,
        &spec,
        opts,
        &lexical_opts,
        head.temperature,
        unseen,
    )?;
    let style_cv = crate::style_cv::figures(&scored);
    progress(&crate::style_cv::summary(&style_cv));
    let p_oob: Vec<f64> = oob
        .iter()
        .map(|z| 1.0 - softmax_t(z, head.temperature)[0])
        .collect();
    let oob_figures = figures(&p_oob, &gold, DEFAULT_THRESHOLD);
    // The dev styles, scored by the record vector alone (the detector's
    // full figures, rules included, come from `tomlite eval`).
    let dev_figures = dev_figures(encoder, &head, &dev, source)?;
    let dev_lexical = dev_lexical_figures(&lexical, &dev, source)?;
    progress(&format!(
        "sensitive head: {} training records and {} ordinary memories ({} rows), temperature {:.3}; out of bag at P >= {DEFAULT_THRESHOLD}: recall {}, controls flagged {}; dev styles ({}): recall {}, controls flagged {}",
        train.len(),
        negatives.len(),
        labels.len(),
        head.temperature,
        oob_figures["recall"],
        oob_figures["control_false_positive_rate"],
        SENSITIVE_HELD_OUT_STYLES.join(", "),
        dev_figures["recall"],
        dev_figures["control_false_positive_rate"],
    ));
    progress(&format!(
        "sensitive lexical model: {} examples, {} terms; dev styles, record or surest sentence: recall {}, controls flagged {}",
        lexical_texts.len(),
        lexical.terms(),
        dev_lexical["recall"],
        dev_lexical["control_false_positive_rate"],
    ));
    let terms = lexical.terms();
    // What each category's word list learned (null: no training text
    // holds one of its words).
    let concept_weights: serde_json::Map<String, Value> = lexical
        .concepts()
        .names()
        .map(|n| {
            let w = lexical.concept_weight(n).map(|w| round4(f64::from(w)));
            (n.to_string(), json!(w))
        })
        .collect();
    Ok(Some(Trained {
        head,
        lexical,
        metrics: json!({
            "training_records": train.len(),
            "ordinary_memories_as_negatives": negatives.len(),
            "held_out_styles": SENSITIVE_HELD_OUT_STYLES,
            "threshold": DEFAULT_THRESHOLD,
            "out_of_bag": oob_figures,
            "dev_record_vector_only": dev_figures,
            "lexical_examples": lexical_texts.len(),
            "lexical_terms": terms,
            "lexical_concept_weights": concept_weights,
            "dev_lexical_only": dev_lexical,
            "style_cross_validation": style_cv,
        }),
    }))
}

/// The sensitive head's training rows: per example its vector, its
/// label, its group (record) and whether it is a record's own vector.
struct TrainingRows {
    x: Rows,
    labels: Vec<usize>,
    group: Vec<usize>,
    is_record: Vec<bool>,
    /// The lexical model's examples: every record, sentence, gold line and
    /// ordinary memory as text (a sentence past the encoder's window too),
    /// and whether it is sensitive.
    lexical: (Vec<String>, Vec<bool>),
    /// The group of each of the lexical model's examples.
    lexical_group: Vec<usize>,
    /// Each training record's label (0: not sensitive, else 1 + its
    /// category).
    record_labels: Vec<usize>,
    /// Per training record, the readings the detector would take of it:
    /// the row of its vector, and the passage's byte span (`None`: the
    /// whole text). A gold line that is not a passage is no reading.
    readings: Vec<Vec<crate::style_cv::Reading>>,
}

/// Each training record's vector; each of its sentences' in-context
/// vectors, labeled with the record's category when the sentence overlaps
/// the gold line and `none` otherwise (the classifier reads P(sensitive)
/// off the surest sentence, so the head must learn which line carries
/// it, not which records do); a sensitive record's gold line as a span of
/// its own; then the weak negatives, ordinary memories
/// ([`may_be_sensitive`] filtered) and their sentences, each memory its
/// own group, never used for the temperature.
fn training_rows(
    encoder: &Encoder,
    train: &[&SensitivityRecord],
    negatives: &[&str],
    source: &str,
) -> Result<TrainingRows, LearnError> {
    let texts: Vec<&str> = train.iter().map(|r| r.text.as_str()).collect();
    let mut labeled_spans: Vec<Vec<((usize, usize), usize)>> = Vec::with_capacity(train.len());
    let mut record_labels: Vec<usize> = Vec::with_capacity(train.len());
    // A record of more passages than the detector reads as a whole is an
    // example by its passages only (`reads_whole_text`).
    let mut whole: Vec<bool> = Vec::with_capacity(train.len());
    let mut passage_count: Vec<usize> = Vec::with_capacity(train.len());
    for r in train {
        let l = label_of(r, source)?;
        record_labels.push(l);
        let gold = r
            .sensitivity
            .quote
            .as_deref()
            .filter(|_| l > 0)
            .and_then(|q| r.text.find(q).map(|s| (s, s + q.len())));
        let mut spans: Vec<((usize, usize), usize)> = tomlite_core::segment::passages(&r.text)
            .into_iter()
            .map(|(s, e)| {
                let on_gold = gold.is_some_and(|(gs, ge)| s < ge && gs < e);
                ((s, e), if on_gold { l } else { 0 })
            })
            .collect();
        whole.push(reads_whole_text(spans.len()));
        passage_count.push(spans.len());
        if let Some(g) = gold
            && !spans.iter().any(|&(span, _)| span == g)
        {
            spans.push((g, l));
        }
        labeled_spans.push(spans);
    }
    let spans: Vec<Vec<(usize, usize)>> = labeled_spans
        .iter()
        .map(|v| v.iter().map(|&(span, _)| span).collect())
        .collect();
    let encoded = encoder.encode_with_spans(&texts, &spans)?;
    let (mut rows, mut labels, mut group, mut is_record) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut lexical_texts, mut lexical_labels, mut lexical_group) =
        (Vec::new(), Vec::new(), Vec::new());
    for (g, (((r, spans), &l), &whole)) in train
        .iter()
        .zip(&labeled_spans)
        .zip(&record_labels)
        .zip(&whole)
        .enumerate()
    {
        if whole {
            lexical_texts.push(r.text.clone());
            lexical_labels.push(l > 0);
            lexical_group.push(g);
        }
        for &((s, e), l) in spans {
            lexical_texts.push(r.text[s..e].to_string());
            lexical_labels.push(l > 0);
            lexical_group.push(g);
        }
    }
    let negative_spans: Vec<Vec<(usize, usize)>> = negatives
        .iter()
        .map(|t| tomlite_core::segment::passages(t))
        .collect();
    for (k, (t, spans)) in negatives.iter().zip(&negative_spans).enumerate() {
        if reads_whole_text(spans.len()) {
            lexical_texts.push(t.to_string());
            lexical_labels.push(false);
            lexical_group.push(train.len() + k);
        }
        for &(s, e) in spans {
            lexical_texts.push(t[s..e].to_string());
            lexical_labels.push(false);
            lexical_group.push(train.len() + k);
        }
    }
    let mut readings = Vec::with_capacity(train.len());
    for (g, &l) in record_labels.iter().enumerate() {
        let mut of_record = Vec::new();
        if whole[g] {
            of_record.push((labels.len(), None));
            rows.extend_from_slice(&encoded.embeddings[g]);
            labels.push(l);
            group.push(g);
            is_record.push(true);
        }
        for (j, (v, &(span, l))) in encoded.spans[g].iter().zip(&labeled_spans[g]).enumerate() {
            if let Some(v) = v {
                if j < passage_count[g] {
                    of_record.push((labels.len(), Some(span)));
                }
                rows.extend_from_slice(v);
                labels.push(l);
                group.push(g);
                is_record.push(false);
            }
        }
        readings.push(of_record);
    }
    let negative = encoder.encode_with_spans(negatives, &negative_spans)?;
    for (k, v) in negative.embeddings.iter().enumerate() {
        let whole = reads_whole_text(negative_spans[k].len()).then_some(v);
        for v in whole.into_iter().chain(negative.spans[k].iter().flatten()) {
            rows.extend_from_slice(v);
            labels.push(0);
            group.push(train.len() + k);
            is_record.push(false);
        }
    }
    Ok(TrainingRows {
        x: Rows::new(rows, encoder.dim())?,
        labels,
        group,
        is_record,
        lexical: (lexical_texts, lexical_labels),
        lexical_group,
        record_labels,
        readings,
    })
}

/// The head's figures on the dev styles, each record scored by its own
/// vector; `null` without dev records.
fn dev_figures(
    encoder: &Encoder,
    head: &Head,
    dev: &[&SensitivityRecord],
    source: &str,
) -> Result<Value, LearnError> {
    if dev.is_empty() {
        return Ok(Value::Null);
    }
    let texts: Vec<&str> = dev.iter().map(|r| r.text.as_str()).collect();
    let encoded = encoder.encode(&texts)?;
    let x = Rows::from_vectors(&encoded.embeddings, encoder.dim())?;
    let p: Vec<f64> = head
        .logits_rows(&x)?
        .iter()
        .map(|z| 1.0 - softmax_t(z, head.temperature)[0])
        .collect();
    dev_figures_of(&p, dev, source)
}

/// [`figures`] of P(sensitive) `p` of the dev records at the default
/// threshold.
fn dev_figures_of(
    p: &[f64],
    dev: &[&SensitivityRecord],
    source: &str,
) -> Result<Value, LearnError> {
    let gold: Vec<usize> = dev
        .iter()
        .map(|r| label_of(r, source))
        .collect::<Result<_, _>>()?;
    Ok(figures(p, &gold, DEFAULT_THRESHOLD))
}

/// The lexical model's figures on the dev styles, each record read as the
/// detector reads it: its surest reading, of the whole text (when
/// [`reads_whole_text`]) and of each passage; `null` without dev records.
fn dev_lexical_figures(
    lexical: &Lexical,
    dev: &[&SensitivityRecord],
    source: &str,
) -> Result<Value, LearnError> {
    if dev.is_empty() {
        return Ok(Value::Null);
    }
    let p: Vec<f64> = dev
        .iter()
        .map(|r| {
            let sentences = tomlite_core::segment::passages(&r.text);
            let skip = usize::from(!reads_whole_text(sentences.len()));
            lexical_probabilities(lexical, &r.text, &sentences)
                .into_iter()
                .skip(skip)
                .fold(0.0, f64::max)
        })
        .collect();
    dev_figures_of(&p, dev, source)
}

/// Recall (overall and per category), false positives on the controls and
/// the ECE of P(sensitive), at `threshold`; `gold` is 0 for a control,
/// 1 + category otherwise.
pub fn figures(p: &[f64], gold: &[usize], threshold: f64) -> Value {
    let detected: Vec<bool> = p.iter().map(|&p| p >= threshold).collect();
    figures_of_detections(p, gold, &detected)
}

/// [`figures`] with the detections given (`detected[i]`: the detector
/// flagged record `i`, by the model's P(sensitive) or by a rule); the ECE
/// is still P(sensitive)'s.
pub fn figures_of_detections(p: &[f64], gold: &[usize], detected: &[bool]) -> Value {
    let pos = gold.iter().filter(|&&g| g > 0).count();
    let neg = gold.len() - pos;
    let hit = |i: usize| detected[i];
    let found = (0..gold.len()).filter(|&i| gold[i] > 0 && hit(i)).count();
    let false_pos = (0..gold.len()).filter(|&i| gold[i] == 0 && hit(i)).count();
    let per: serde_json::Map<String, Value> = SENSITIVE_CATEGORIES
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let of: Vec<usize> = (0..gold.len()).filter(|&i| gold[i] == c + 1).collect();
            let got = of.iter().filter(|&&i| hit(i)).count();
            (
                name.to_string(),
                json!({"support": of.len(), "recall": ratio(got, of.len())}),
            )
        })
        .collect();
    let correct: Vec<bool> = gold.iter().map(|&g| g > 0).collect();
    json!({
        "sensitive": pos,
        "controls": neg,
        "recall": ratio(found, pos),
        "per_category": per,
        "control_false_positives": false_pos,
        "control_false_positive_rate": ratio(false_pos, neg),
        "ece": round4(ece(p, &correct, 10)),
    })
}

/// `tomlite eval --sensitivity`: the detector as the classifier runs it
/// (head, lexical model and rules) on labeled records (only the held-out
/// styles with `dev`): recall overall and per category and false positives
/// on the hard controls, of its detections; the ECE of P(sensitive); how
/// often a detected sensitive record gets its gold category; and, under
/// `model_only`, recall and false positives of P(sensitive) alone;
/// `trade_off` ([`trade_off`]) on the detector's confidence.
pub fn eval(clf: &mut Classifier, files: &[PathBuf], dev: bool) -> Result<Value, LearnError> {
    let records: Vec<SensitivityRecord> = read_all(files)?
        .into_iter()
        .filter(|r| !dev || is_held_out(r))
        .collect();
    let source = files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let thresholds = clf.sensitive_thresholds().unwrap_or_default();
    let threshold = thresholds.general;
    let texts: Vec<&str> = records.iter().map(|r| r.text.as_str()).collect();
    let mut p = Vec::with_capacity(records.len());
    let mut gold = Vec::with_capacity(records.len());
    let mut detected = Vec::with_capacity(records.len());
    let mut confidence = Vec::with_capacity(records.len());
    let (mut right_category, mut detected_sensitive) = (0usize, 0usize);
    let mut quote_hits = 0usize;
    for (chunk, recs) in texts.chunks(64).zip(records.chunks(64)) {
        let scores = clf.score(chunk)?;
        for ((text, r), s) in chunk.iter().zip(recs).zip(&scores) {
            let g = label_of(r, &source)?;
            let p_sensitive = clf.sensitive_probability(text, s);
            p.push(p_sensitive);
            gold.push(g);
            let found = clf.detect_sensitive(text, s);
            detected.push(found.is_some());
            // The detection's confidence (1 for a rule's finding), else P.
            confidence.push(
                found
                    .as_ref()
                    .and_then(|f| f.confidence)
                    .unwrap_or(p_sensitive),
            );
            if g > 0
                && let Some(found) = found
            {
                detected_sensitive += 1;
                if found.category.as_deref() == r.sensitivity.category.as_deref() {
                    right_category += 1;
                }
                // The quote overlaps the gold line.
                if let (Some(q), Some(qs), Some(qe)) = (
                    r.sensitivity.quote.as_deref(),
                    found.quote.start,
                    found.quote.end,
                ) && let Some(gs) = r.text.find(q)
                    && (qs as usize) < gs + q.len()
                    && gs < qe as usize
                {
                    quote_hits += 1;
                }
            }
        }
    }
    // The detector as it runs (model and rules) sets recall and false
    // positives; the model's P(sensitive) alone is kept beside them.
    let mut out = figures_of_detections(&p, &gold, &detected);
    let model_only = figures(&p, &gold, threshold);
    if let Value::Object(o) = &mut out {
        o.insert(
            "model_only".into(),
            json!({
                "recall": model_only["recall"],
                "control_false_positive_rate": model_only["control_false_positive_rate"],
                "mental_health_self_harm_recall":
                    model_only["per_category"]["mental_health_self_harm"]["recall"],
            }),
        );
        o.insert("trade_off".into(), trade_off(&confidence, &gold));
        o.insert("data".into(), json!(source));
        o.insert("split".into(), json!(if dev { "dev" } else { "all" }));
        o.insert("records".into(), json!(records.len()));
        o.insert("threshold".into(), json!(threshold));
        o.insert("safety_threshold".into(), json!(thresholds.safety));
        o.insert(
            "category_right_when_detected".into(),
            ratio(right_category, detected_sensitive),
        );
        o.insert(
            "quote_overlaps_gold_line".into(),
            ratio(quote_hits, detected_sensitive),
        );
    }
    Ok(json!({"sensitivity": out}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trade_off_ranks_reads_each_threshold_and_the_controls_limit() {
        let self_harm = 2; // mental_health_self_harm, after `health`
        assert_eq!(
            SENSITIVE_CATEGORIES[self_harm - 1],
            "mental_health_self_harm"
        );
        // 4 sensitive (one self-harm), 10 controls.
        let scores = [
            0.9, 0.45, 0.3, 0.22, // sensitive
            0.6, 0.34, 0.3, 0.1, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0, // controls
        ];
        let gold = [1, self_harm, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let t = trade_off(&scores, &gold);
        // Pairs: 0.9 beats 10; 0.45 beats 9; 0.3 beats 7 and ties 1; 0.22 beats 7.
        assert_eq!(t["auc"], round4((10.0 + 9.0 + 7.5 + 7.0) / 40.0));
        let at = |x: f64| {
            t["at_thresholds"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["threshold"] == x)
                .unwrap()
                .clone()
        };
        assert_eq!(at(0.3)["recall"], 0.75);
        assert_eq!(at(0.3)["control_false_positive_rate"], 0.3);
        assert_eq!(at(0.35)["recall"], 0.5);
        assert_eq!(at(0.35)["mental_health_self_harm_recall"], 1.0);
        assert_eq!(at(0.5)["mental_health_self_harm_recall"], 0.0);
        // At most 1 of 10 controls: the lowest such threshold is 0.45
        // (0.34 would flag two).
        let lim = &t["recall_at_controls_flagged_at_most"]["at"];
        assert_eq!(lim["threshold"], 0.45);
        assert_eq!(lim["recall"], 0.5);
        assert_eq!(lim["control_false_positive_rate"], 0.1);
        assert!(trade_off(&[0.5], &[0]).is_null());
    }

    #[test]
    fn the_lexicon_names_every_category_in_order_and_bad_files_are_refused() {
        let c = sensitive_concepts().unwrap();
        assert_eq!(c.names().collect::<Vec<_>>(), SENSITIVE_CATEGORIES);
        let err = |json: &str| concepts_from(json).unwrap_err().to_string();
        assert!(err("[").contains("sensitive_lexicon.json"));
        assert!(
            err(r#"{"weather": ["rain"]}"#).contains("\"weather\" is not a sensitive category")
        );
        assert!(err(r#"{"health": ["chemo"]}"#).contains("is missing"));
        let mut all: serde_json::Map<String, Value> = SENSITIVE_CATEGORIES
            .iter()
            .map(|c| (c.to_string(), json!(["word"])))
            .collect();
        assert!(concepts_from(&Value::Object(all.clone()).to_string()).is_ok());
        all.insert("health".into(), json!(["Two Words"]));
        assert!(err(&Value::Object(all).to_string()).contains("\"Two Words\""));
    }

    #[test]
    fn figures_count_recall_per_category_and_false_positives_on_controls() {
        let p = [0.9, 0.2, 0.5, 0.1, 0.6];
        let gold = [2, 2, 9, 0, 0];
        let f = figures(&p, &gold, 0.35);
        assert_eq!(f["recall"], 0.6667);
        assert_eq!(f["per_category"]["mental_health_self_harm"]["recall"], 0.5);
        assert_eq!(f["per_category"]["credentials_pii"]["recall"], 1.0);
        assert_eq!(f["control_false_positives"], 1);
        assert_eq!(f["control_false_positive_rate"], 0.5);
        assert!(f["per_category"]["health"]["recall"].is_null());
    }
}
