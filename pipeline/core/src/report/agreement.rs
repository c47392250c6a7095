//! The curator's agreement with the model in the next night's report: the
//! figures `tomlite curate status` computes (per head and confidence bin,
//! bulk decisions apart, whether each threshold holds), shown when the
//! staging directory holding the run has curated decisions.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

/// `curate status`'s agreement figures for the staging directory holding
/// `run_dir` (`<staging>/runs/<run>`); `Null` when it has no curated
/// decisions. A curated table that cannot be read does not stop the night:
/// the report says why instead (`{"error": …}`).
pub fn agreement(run_dir: &Path) -> Value {
    let Some(staging) = run_dir.parent().and_then(Path::parent) else {
        return Value::Null;
    };
    if !staging.join(crate::curate::CURATED_FILE).is_file() {
        return Value::Null;
    }
    match crate::curate::status(staging, None) {
        Ok(status) => json!({
            "applied": status["applied"],
            "heads": status["agreement"],
        }),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// `agreed/decided` of a bin, or `–` when nothing was decided in it.
fn cell(bin: &Value) -> String {
    match bin["decided"].as_u64().unwrap_or(0) {
        0 => "–".to_string(),
        n => format!("{}/{n}", bin["agreed"].as_u64().unwrap_or(0)),
    }
}

/// Whether a head's threshold holds on the curator's decisions, in words.
fn verdict(head: &Value) -> String {
    let at = &head["at_or_above_threshold"];
    let threshold = head["threshold"].as_f64().unwrap_or(0.0);
    match (head["threshold_holds"].as_bool(), at["rate"].as_f64()) {
        (Some(true), Some(rate)) => format!(
            "holds: at or above {threshold:.2} the curator agreed {rate:.2} of the time ({}/{})",
            at["agreed"], at["decided"]
        ),
        (Some(false), Some(rate)) => format!(
            "does NOT hold: at or above {threshold:.2} the curator agreed only {rate:.2} of the time ({}/{})",
            at["agreed"], at["decided"]
        ),
        _ => "no one-by-one decision at or above it yet".to_string(),
    }
}

/// The agreement section of `report.md` (nothing without curated decisions).
pub(super) fn markdown_section(out: &mut String, data: &Value) {
    let agreement = &data["agreement"];
    if agreement.is_null() {
        return;
    }
    let _ = writeln!(out, "\n## Curator agreement\n");
    if let Some(error) = agreement["error"].as_str() {
        let _ = writeln!(
            out,
            "The curated decisions could not be read: {}",
            super::inert::md_line(error)
        );
        return;
    }
    let Some(heads) = agreement["heads"].as_object() else {
        return;
    };
    let _ = writeln!(
        out,
        "How often the curator agreed with the model, by the model's confidence, over the {} applied decisions of this staging directory (agreed/decided; one-by-one decisions, bulk apart). The thresholds are not changed by it.\n",
        agreement["applied"].as_u64().unwrap_or(0)
    );
    let bins: Vec<String> = heads
        .values()
        .next()
        .map(|head| super::inert::items(&head["bins"]))
        .unwrap_or_default()
        .iter()
        .map(|bin| bin["bin"].as_str().unwrap_or("").to_string())
        .collect();
    let _ = writeln!(
        out,
        "| head | threshold | {} | bulk |\n|---|---:|{}---:|",
        bins.join(" | "),
        "---:|".repeat(bins.len())
    );
    for (name, head) in heads {
        let cells: Vec<String> = super::inert::items(&head["bins"])
            .iter()
            .map(cell)
            .collect();
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} | {} |",
            super::inert::md(name),
            head["threshold"].as_f64().unwrap_or(0.0),
            cells.join(" | "),
            cell(&head["bulk"])
        );
    }
    out.push('\n');
    for (name, head) in heads {
        let _ = writeln!(
            out,
            "- {} (threshold {:.2}): {}",
            super::inert::md(name),
            head["threshold"].as_f64().unwrap_or(0.0),
            verdict(head)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(threshold: f64, bins: &[(u64, u64)], holds: Option<bool>, above: (u64, u64)) -> Value {
        let names = [
            "0.0-0.5", "0.5-0.6", "0.6-0.7", "0.7-0.8", "0.8-0.9", "0.9-1.0",
        ];
        let bins: Vec<Value> = names
            .iter()
            .zip(bins)
            .map(|(name, &(n, k))| json!({"bin": name, "decided": n, "agreed": k}))
            .collect();
        let rate = (above.0 > 0).then(|| above.1 as f64 / above.0 as f64);
        json!({"threshold": threshold, "bins": bins, "threshold_holds": holds,
               "at_or_above_threshold": {"decided": above.0, "agreed": above.1, "rate": rate},
               "bulk": {"decided": 6, "agreed": 6}})
    }

    #[test]
    fn the_section_tabulates_each_head_per_bin_and_says_whether_its_threshold_holds() {
        let data = json!({"agreement": {"applied": 26, "heads": {
            "tom_kind": head(0.8, &[(0, 0), (1, 0), (0, 0), (2, 1), (3, 2), (4, 4)], Some(false), (7, 6)),
            "affect": head(0.7, &[(0, 0); 6], None, (0, 0)),
        }}});
        let mut out = String::new();
        markdown_section(&mut out, &data);
        assert!(out.contains("## Curator agreement"), "{out}");
        assert!(out.contains("over the 26 applied decisions"), "{out}");
        assert!(out.contains("| head | threshold | 0.0-0.5 | 0.5-0.6 | 0.6-0.7 | 0.7-0.8 | 0.8-0.9 | 0.9-1.0 | bulk |"), "{out}");
        assert!(
            out.contains("| tom_kind | 0.80 | – | 0/1 | – | 1/2 | 2/3 | 4/4 | 6/6 |"),
            "{out}"
        );
        assert!(
            out.contains("| affect | 0.70 | – | – | – | – | – | – | 6/6 |"),
            "{out}"
        );
        assert!(out.contains("- tom_kind (threshold 0.80): does NOT hold: at or above 0.80 the curator agreed only 0.86 of the time (6/7)"), "{out}");
        assert!(
            out.contains("- affect (threshold 0.70): no one-by-one decision at or above it yet"),
            "{out}"
        );
    }

    #[test]
    fn no_curated_decisions_no_section() {
        let mut out = String::new();
        markdown_section(&mut out, &json!({"agreement": null}));
        assert!(out.is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert!(agreement(&dir.path().join("runs").join("r1")).is_null());
    }
}
