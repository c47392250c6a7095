//! How a detector's scores rank sensitive records above hard controls:
//! the figures `tomlite eval --sensitivity` and the style
//! cross-validation of training (`crate::style_cv`) both report.

use serde_json::{Value, json};

use tomlite_core::annotate::sensitive::round4;
use tomlite_core::vocab::SENSITIVE_CATEGORIES;

/// `a / b` rounded to four places, `null` when `b` is 0.
pub fn ratio(a: usize, b: usize) -> Value {
    if b == 0 {
        Value::Null
    } else {
        json!(round4(a as f64 / b as f64))
    }
}

/// Thresholds at which [`trade_off`] reads recall and false positives.
pub const TRADE_OFF_THRESHOLDS: [f64; 7] = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5];

/// Share of the hard controls a threshold may flag in [`trade_off`]'s
/// `recall_at_controls_flagged_at_most`.
pub const CONTROLS_FLAGGED_AT_MOST: f64 = 0.1;

/// How the detector's confidence (`scores`: a record's detection's
/// confidence, else its P(sensitive)) ranks sensitive records (`gold` > 0)
/// above controls: the AUC (ties count a half), recall, self-harm recall
/// and controls flagged at each of [`TRADE_OFF_THRESHOLDS`], and the
/// recall of the lowest threshold that flags at most
/// [`CONTROLS_FLAGGED_AT_MOST`] of the controls. `Null` without both
/// classes.
pub fn trade_off(scores: &[f64], gold: &[usize]) -> Value {
    let pos: Vec<f64> = (0..gold.len())
        .filter(|&i| gold[i] > 0)
        .map(|i| scores[i])
        .collect();
    let neg: Vec<f64> = (0..gold.len())
        .filter(|&i| gold[i] == 0)
        .map(|i| scores[i])
        .collect();
    if pos.is_empty() || neg.is_empty() {
        return Value::Null;
    }
    let pairs: f64 = pos
        .iter()
        .map(|&p| {
            neg.iter()
                .map(|&n| match p.total_cmp(&n) {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                })
                .sum::<f64>()
        })
        .sum();
    let auc = pairs / (pos.len() * neg.len()) as f64;
    let at_least = |v: &[f64], t: f64| v.iter().filter(|&&x| x >= t).count();
    let self_harm = SENSITIVE_CATEGORIES
        .iter()
        .position(|c| *c == tomlite_core::vocab::SAFETY_CATEGORY)
        .map(|c| c + 1);
    let safety: Vec<f64> = (0..gold.len())
        .filter(|&i| Some(gold[i]) == self_harm)
        .map(|i| scores[i])
        .collect();
    let rows: Vec<Value> = TRADE_OFF_THRESHOLDS
        .iter()
        .map(|&t| {
            json!({
                "threshold": t,
                "recall": ratio(at_least(&pos, t), pos.len()),
                "mental_health_self_harm_recall": ratio(at_least(&safety, t), safety.len()),
                "control_false_positive_rate": ratio(at_least(&neg, t), neg.len()),
            })
        })
        .collect();
    // The lowest score that, as a threshold, flags few enough controls.
    let allowed = (CONTROLS_FLAGGED_AT_MOST * neg.len() as f64).floor() as usize;
    let lowest = scores
        .iter()
        .copied()
        .filter(|&t| at_least(&neg, t) <= allowed)
        .fold(f64::INFINITY, f64::min);
    let at_most = if lowest.is_finite() {
        json!({"threshold": round4(lowest), "recall": ratio(at_least(&pos, lowest), pos.len()),
               "control_false_positive_rate": ratio(at_least(&neg, lowest), neg.len())})
    } else {
        Value::Null
    };
    json!({
        "auc": round4(auc),
        "at_thresholds": rows,
        "recall_at_controls_flagged_at_most": {"controls": CONTROLS_FLAGGED_AT_MOST, "at": at_most},
    })
}
