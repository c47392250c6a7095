//! How the sensitive-content detector reads styles its head and lexical
//! model never saw: cross-validation over whole styles of the training
//! records. Each fold of styles is scored by a head and a lexical model
//! trained without it, and only its records the encoder was not
//! fine-tuned on are scored. The encoder was fine-tuned on the other
//! records of those styles, labels included, and the head's temperature
//! is the full fit's (its out-of-bag scores include the fold's records),
//! so the figures are an upper bound on a truly new writer's, not an
//! unbiased estimate. The dev styles take no part, and the figures go to
//! the card: the trade-off of the detector's reading (the model alone,
//! without the rules), and a sweep of the lexical model's share of a
//! reading that checks [`tomlite_core::annotate::sensitive::LEXICAL_SHARE`] on
//! each fit. A passage past the encoder's window of its record has no
//! in-context vector in training and is not read here (the classifier
//! encodes it on its own), so the last lines of the longest records are
//! left out.

use serde_json::{Value, json};
use tomlite_models::Rows;
use tomlite_models::data::SensitivityRecord;
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::lexical::{Lexical, LexicalOptions};
use tomlite_models::metrics::softmax_t;

use crate::error::LearnError;
use crate::trade_off::trade_off;
use tomlite_core::annotate::sensitive::{DEFAULT_THRESHOLD, LEXICAL_SHARE, mix};

/// Folds of styles.
pub const STYLE_FOLDS: u64 = 5;

/// The lexical model's shares of a reading that the sweep tries, in
/// steps of 1/[`SHARE_STEPS`] from 0 (the head alone) to 1 (the words
/// alone).
pub const SHARE_STEPS: usize = 20;

/// The fold of a record: its style's (its id's without one), by a hash
/// of the name, so that adding a style never moves the others.
pub fn fold_of(r: &SensitivityRecord) -> u64 {
    tomlite_models::data::fnv1a64(r.style.as_deref().unwrap_or(&r.id)) % STYLE_FOLDS
}

/// One reading of a record: the row of its vector, and the passage's byte
/// span (`None`: the whole text).
pub type Reading = (usize, Option<(usize, usize)>);

/// What the cross-validation of the training rows needs.
pub struct Folds<'a> {
    /// The training records, in the rows' group order.
    pub records: &'a [&'a SensitivityRecord],
    /// Each record's label (0: not sensitive, else 1 + its category).
    pub record_labels: &'a [usize],
    /// The head's rows: one vector each.
    pub x: &'a Rows,
    /// Each row's label (0: `none`, else 1 + its category).
    pub labels: &'a [usize],
    /// Each row's group: its record's index, or past the records an
    /// ordinary memory, trained on in every fold.
    pub group: &'a [usize],
    /// The lexical model's examples.
    pub lexical_texts: &'a [String],
    /// Whether each lexical example is sensitive.
    pub lexical_labels: &'a [bool],
    /// Each lexical example's group, as [`Folds::group`].
    pub lexical_group: &'a [usize],
    /// Per record, its readings: a row and a passage span (`None`: the
    /// whole text).
    pub readings: &'a [Vec<Reading>],
}

/// Per scored record: its label and each reading's (head P, lexical P).
pub type Scored = Vec<(usize, Vec<(f64, f64)>)>;

/// Scores every record `scored` admits with models trained without its
/// fold; `temperature` is the head's (fitted out of bag on all the data).
pub fn cross_validate(
    folds: &Folds<'_>,
    spec: &HeadSpec,
    opts: &TrainOptions,
    lexical_opts: &LexicalOptions,
    temperature: f64,
    scored: &dyn Fn(&SensitivityRecord) -> bool,
) -> Result<Scored, LearnError> {
    let n = folds.records.len();
    let fold: Vec<u64> = folds.records.iter().map(|r| fold_of(r)).collect();
    let held = |g: usize, f: u64| g < n && fold[g] == f;
    let mut out = Vec::new();
    for f in 0..STYLE_FOLDS {
        let test: Vec<usize> = (0..n)
            .filter(|&g| fold[g] == f && scored(folds.records[g]))
            .collect();
        if test.is_empty() {
            continue;
        }
        let rows: Vec<usize> = (0..folds.labels.len())
            .filter(|&i| !held(folds.group[i], f))
            .collect();
        let labels: Vec<usize> = rows.iter().map(|&i| folds.labels[i]).collect();
        if labels.iter().all(|&l| l == 0) {
            continue;
        }
        let x = subset(folds.x, &rows)?;
        let targets = Targets::Single {
            labels: labels.iter().map(|&l| l as u32).collect(),
            weights: crate::bagging::class_weights(&labels, spec.labels.len()),
        };
        let head = Head::train(spec.clone(), &x, &targets, opts, |_, _| {})?;
        let lexical_at: Vec<usize> = (0..folds.lexical_texts.len())
            .filter(|&i| !held(folds.lexical_group[i], f))
            .collect();
        let lexical = Lexical::train(
            &lexical_at
                .iter()
                .map(|&i| folds.lexical_texts[i].as_str())
                .collect::<Vec<_>>(),
            &lexical_at
                .iter()
                .map(|&i| folds.lexical_labels[i])
                .collect::<Vec<_>>(),
            lexical_opts,
        )?;
        for g in test {
            let r = folds.records[g];
            let of = &folds.readings[g];
            if of.is_empty() {
                continue;
            }
            let x = subset(folds.x, &of.iter().map(|&(row, _)| row).collect::<Vec<_>>())?;
            let readings = head
                .logits_rows(&x)?
                .iter()
                .zip(of)
                .map(|(z, &(_, span))| {
                    let text = span.map_or(r.text.as_str(), |(s, e)| &r.text[s..e]);
                    (
                        1.0 - softmax_t(z, temperature)[0],
                        lexical.probability(text),
                    )
                })
                .collect();
            let label = folds.record_labels[g];
            out.push((label, readings));
        }
    }
    Ok(out)
}

/// A record's P(sensitive) with the lexical model's `share` of each
/// reading: its surest reading, as the detector takes it.
pub fn record_score(readings: &[(f64, f64)], share: f64) -> f64 {
    readings
        .iter()
        .map(|&(h, l)| mix(h, l, share))
        .fold(0.0, f64::max)
}

/// The figures of the scored records: how many, the trade-off
/// ([`trade_off`]) of the detector's reading, and per share of the sweep
/// its AUC and its recall at a threshold that flags at most
/// [`crate::trade_off::CONTROLS_FLAGGED_AT_MOST`] of the controls, with the share that
/// keeps the most there (ties: the higher AUC, then the share nearer the
/// detector's; `null` without both classes).
pub fn figures(scored: &Scored) -> Value {
    let gold: Vec<usize> = scored.iter().map(|(l, _)| *l).collect();
    let at = |share: f64| {
        let scores: Vec<f64> = scored.iter().map(|(_, r)| record_score(r, share)).collect();
        trade_off(&scores, &gold)
    };
    let mut best: Option<(f64, (f64, f64, f64))> = None;
    let mut sweep = Vec::new();
    for k in 0..=SHARE_STEPS {
        let share = k as f64 / SHARE_STEPS as f64;
        let t = at(share);
        if t.is_null() {
            continue;
        }
        let auc = t["auc"].as_f64().unwrap_or(0.0);
        let limit = &t["recall_at_controls_flagged_at_most"]["at"];
        let recall = limit["recall"].as_f64().unwrap_or(0.0);
        let key = (recall, auc, -(share - LEXICAL_SHARE).abs());
        if best.is_none_or(|(_, b)| key > b) {
            best = Some((share, key));
        }
        sweep.push(json!({"lexical_share": share, "auc": auc,
            "recall_at_controls_flagged_at_most": limit["recall"].clone(),
            "threshold": limit["threshold"].clone()}));
    }
    let sensitive = gold.iter().filter(|&&g| g > 0).count();
    json!({
        "style_folds": STYLE_FOLDS,
        "records_scored": gold.len(),
        "sensitive": sensitive,
        "controls": gold.len() - sensitive,
        "lexical_share": LEXICAL_SHARE,
        "trade_off": at(LEXICAL_SHARE),
        "best_lexical_share": best.map(|(s, _)| s),
        "lexical_share_sweep": sweep,
    })
}

/// One line of [`figures`] for `tomlite train`'s progress.
pub fn summary(figures: &Value) -> String {
    let t = &figures["trade_off"];
    let at = t["at_thresholds"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["threshold"].as_f64() == Some(DEFAULT_THRESHOLD))
        })
        .cloned()
        .unwrap_or(Value::Null);
    format!(
        "sensitive head, cross-validated over {} folds of training styles ({} records the encoder never saw, model without rules): AUC {}, at P >= {DEFAULT_THRESHOLD} recall {} (self-harm {}), controls flagged {}; lexical share {} (best in the sweep {})",
        figures["style_folds"],
        figures["records_scored"],
        t["auc"],
        at["recall"],
        at["mental_health_self_harm_recall"],
        at["control_false_positive_rate"],
        figures["lexical_share"],
        figures["best_lexical_share"],
    )
}

/// The rows `at` of `x`.
fn subset(x: &Rows, at: &[usize]) -> Result<Rows, LearnError> {
    let mut data = Vec::with_capacity(at.len() * x.dim());
    for &i in at {
        data.extend_from_slice(x.row(i));
    }
    Ok(Rows::new(data, x.dim())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_as_its_surest_mixed_reading() {
        let r = [(0.9, 0.1), (0.4, 0.8)];
        assert!((record_score(&r, 0.0) - 0.9).abs() < 1e-12);
        assert!((record_score(&r, 1.0) - 0.8).abs() < 1e-12);
        assert!((record_score(&r, 0.5) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn the_sweep_finds_the_share_nearest_the_detectors_that_separates_the_classes() {
        // The head ranks every control above the sensitive records, the
        // words rank them right: at the detector's equal share the controls
        // still come first (0.55 against 0.5), from 0.55 on the words
        // separate them, and of the shares that do, the nearest to the
        // detector's wins.
        let scored: Scored = vec![
            (1, vec![(0.1, 0.9)]),
            (3, vec![(0.2, 0.8)]),
            (0, vec![(0.9, 0.2)]),
            (0, vec![(0.8, 0.3)]),
        ];
        let f = figures(&scored);
        assert_eq!(f["best_lexical_share"], 0.55);
        assert_eq!(f["records_scored"], 4);
        assert_eq!(f["sensitive"], 2);
        let sweep = f["lexical_share_sweep"].as_array().unwrap();
        assert_eq!(sweep.len(), SHARE_STEPS + 1);
        assert_eq!(sweep[SHARE_STEPS]["auc"], 1.0);
        assert_eq!(sweep[0]["auc"], 0.0);
        // The detector's own reading ranks them wrong.
        assert_eq!(f["trade_off"]["auc"], 0.0);
        assert!(summary(&f).contains("AUC 0.0"), "{}", summary(&f));
        assert!(
            summary(&f).contains("best in the sweep 0.55"),
            "{}",
            summary(&f)
        );
        // The other way round, the head is right and wins from 0.45 down.
        let flipped: Scored = scored
            .into_iter()
            .map(|(l, r)| (l, r.into_iter().map(|(h, w)| (w, h)).collect()))
            .collect();
        assert_eq!(figures(&flipped)["best_lexical_share"], 0.45);
    }

    #[test]
    fn without_both_classes_there_is_no_trade_off() {
        let scored: Scored = vec![(0, vec![(0.2, 0.9)]), (0, vec![(0.3, 0.8)])];
        let f = figures(&scored);
        assert!(f["trade_off"].is_null());
        assert!(f["best_lexical_share"].is_null());
        assert_eq!(f["controls"], 2);
    }

    #[test]
    fn a_style_stays_in_one_fold() {
        let record = |id: &str, style: Option<&str>| SensitivityRecord {
            id: id.to_string(),
            text: "t".into(),
            style: style.map(str::to_string),
            sensitivity: tomlite_models::data::SensitivityLabel {
                sensitive: false,
                category: None,
                quote: None,
            },
        };
        let folds: Vec<u64> = (0..40)
            .map(|i| fold_of(&record(&format!("r{i}"), Some("voice_memo"))))
            .collect();
        assert!(folds.iter().all(|&f| f == folds[0] && f < STYLE_FOLDS));
        // Records without a style spread over the folds by id.
        let spread: std::collections::BTreeSet<u64> = (0..40)
            .map(|i| fold_of(&record(&format!("r{i}"), None)))
            .collect();
        assert!(spread.len() > 1);
    }
}
