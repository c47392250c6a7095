//! The run's report for the curator: `report.html` (one self-contained
//! page: the data inline as JSON, drawn and filtered by inline JS, no
//! network) and `report.md` (the same at a glance, for a terminal or a
//! ticket). Both are built from the run's own tables once they are closed,
//! so they show exactly what was staged.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::nodes::Registry;
use crate::policy::Policy;
use crate::tables;
use crate::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// The page template; `__TOMLITE_DATA__` is replaced by the data.
const TEMPLATE: &str = include_str!("report/report.html");

/// Queue items the page holds at most (it says when it holds fewer): more
/// than a curator works through in a night, and the page stays quick and
/// the run's memory bounded on a million-record night.
pub const MAX_QUEUE_ITEMS: usize = 25_000;
/// Abstained and rejected rows the page lists at most.
pub const MAX_LISTED: usize = 5_000;

/// Errors of building the report.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the report from {table}: {message}")]
pub struct ReportError {
    /// The table that could not be read.
    pub table: String,
    /// What went wrong.
    pub message: String,
}

/// What the report is built from.
pub struct ReportInput<'a> {
    /// The run directory (its tables closed).
    pub dir: &'a Path,
    /// The run's receipt.
    pub receipt: &'a Value,
    /// The previous committed run's receipt, if any.
    pub previous: Option<Value>,
    /// The effective policy.
    pub policy: &'a Policy,
    /// The node registry, if any.
    pub registry: Option<&'a Registry>,
}

fn f(m: &Map<String, Value>, k: &str) -> Option<f64> {
    m.get(k).and_then(Value::as_f64)
}

fn st<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

/// 20 bins of width 0.05 over [0, 1].
fn histogram(values: impl Iterator<Item = f64>) -> Vec<u64> {
    let mut h = vec![0u64; 20];
    for v in values {
        if v.is_finite() {
            h[((v.clamp(0.0, 1.0) * 20.0) as usize).min(19)] += 1;
        }
    }
    h
}

/// UTF-16 offsets of a verbatim quote at byte offsets, for the page's JS.
fn utf16_span(
    text: &str,
    start: Option<u64>,
    end: Option<u64>,
    quote: Option<&str>,
) -> Option<(usize, usize)> {
    let (s, e, q) = (start? as usize, end? as usize, quote?);
    if s > e || e > text.len() || !text.is_char_boundary(s) || !text.is_char_boundary(e) {
        return None;
    }
    if &text[s..e] != q || q.is_empty() {
        return None;
    }
    let a = text[..s].encode_utf16().count();
    Some((a, a + text[s..e].encode_utf16().count()))
}

fn each(
    dir: &Path,
    name: &str,
    fields: &[&str],
    f: impl FnMut(Map<String, Value>),
) -> Result<(), ReportError> {
    crate::parquet_in::rows_each(&dir.join(format!("{name}.parquet")), fields, f).map_err(|e| {
        ReportError {
            table: name.to_string(),
            message: e.to_string(),
        }
    })
}

/// The page's data (see the template for how it is drawn). Tables are
/// streamed: the queue keeps its first [`MAX_QUEUE_ITEMS`] items, the
/// counts, histograms and personas cover every row.
pub fn data(input: &ReportInput<'_>) -> Result<Value, ReportError> {
    let dir = input.dir;
    let mut hist: BTreeMap<&str, [Vec<f64>; 2]> = BTreeMap::new();
    let mut personas: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    let mut push = |head: &'static str, which: usize, v: Option<f64>| {
        if let Some(v) = v {
            hist.entry(head).or_default()[which].push(v);
        }
    };
    each(
        dir,
        "promoted_tags",
        &[
            "persona_id",
            "tom_kind_confidence",
            "affect_confidence",
            "intensity_confidence",
        ],
        |r| {
            push("tom_kind", 0, f(&r, "tom_kind_confidence"));
            push("affect", 0, f(&r, "affect_confidence"));
            push("intensity", 0, f(&r, "intensity_confidence"));
            personas
                .entry(st(&r, "persona_id").unwrap_or("").to_string())
                .or_default()[0] += 1;
        },
    )?;
    each(dir, "promoted_edges", &["persona_id", "confidence"], |r| {
        push("edge", 0, f(&r, "confidence"));
        personas
            .entry(st(&r, "persona_id").unwrap_or("").to_string())
            .or_default()[0] += 1;
    })?;
    let mut texts: Vec<String> = Vec::new();
    let mut text_ix: BTreeMap<String, usize> = BTreeMap::new();
    let mut queue = Vec::new();
    let mut queue_total = 0usize;
    let all: Vec<&str> = tables::QUARANTINE.iter().map(|c| c.0).collect();
    each(dir, "quarantine", &all, |q| {
        queue_total += 1;
        personas
            .entry(st(&q, "persona_id").unwrap_or("").to_string())
            .or_default()[1] += 1;
        match st(&q, "item_type") {
            Some("tag") => {
                push("tom_kind", 1, f(&q, "confidence"));
                push("affect", 1, f(&q, "affect_confidence"));
                push("intensity", 1, f(&q, "intensity_confidence"));
            }
            Some("edge") => push("edge", 1, f(&q, "confidence")),
            _ => {}
        }
        if queue.len() >= MAX_QUEUE_ITEMS {
            return;
        }
        let text = st(&q, "record_text").unwrap_or("");
        let ix = match text_ix.get(text) {
            Some(&i) => i,
            None => {
                texts.push(text.to_string());
                text_ix.insert(text.to_string(), texts.len() - 1);
                texts.len() - 1
            }
        };
        let quote = st(&q, "source_quote");
        let span = utf16_span(
            text,
            q.get("quote_start").and_then(Value::as_u64),
            q.get("quote_end").and_then(Value::as_u64),
            quote,
        );
        queue.push(json!({
            "item_id": q.get("item_id"), "item_type": q.get("item_type"), "record_id": q.get("record_id"),
            "persona_id": q.get("persona_id"), "record_kind": q.get("record_kind"), "source_path": q.get("source_path"),
            "label": q.get("label"), "confidence": q.get("confidence"), "suggested_label": q.get("suggested_label"),
            "affect": q.get("affect"), "affect_confidence": q.get("affect_confidence"), "suggested_affect": q.get("suggested_affect"),
            "intensity": q.get("intensity"), "intensity_confidence": q.get("intensity_confidence"), "suggested_intensity": q.get("suggested_intensity"),
            "target_node": q.get("target_node"), "target_mention": q.get("target_mention"), "edge_key": q.get("edge_key"),
            "reasons": q.get("reasons"), "detail": q.get("detail"),
            "quote": quote, "q16_start": span.map(|s| s.0), "q16_end": span.map(|s| s.1),
            "text": ix, "raw_annotation": q.get("raw_annotation"),
        }));
    })?;
    let mut abstained = Vec::new();
    let mut abstained_total = 0usize;
    let cols: Vec<&str> = tables::ABSTAINED.iter().map(|c| c.0).collect();
    each(dir, "abstained", &cols, |a| {
        abstained_total += 1;
        personas
            .entry(st(&a, "persona_id").unwrap_or("").to_string())
            .or_default()[2] += 1;
        if abstained.len() < MAX_LISTED {
            abstained.push(Value::Object(a));
        }
    })?;
    let mut rejects = Vec::new();
    let mut rejects_total = 0usize;
    let cols: Vec<&str> = tables::REJECTS.iter().map(|c| c.0).collect();
    each(dir, "rejects", &cols, |x| {
        rejects_total += 1;
        if rejects.len() < MAX_LISTED {
            rejects.push(Value::Object(x));
        }
    })?;
    let histograms: Map<String, Value> = ["tom_kind", "affect", "intensity", "edge"]
        .iter()
        .map(|h| {
            let [p, q] = hist.remove(h).unwrap_or_default();
            (
                h.to_string(),
                json!({"promoted": histogram(p.into_iter()), "quarantined": histogram(q.into_iter())}),
            )
        })
        .collect();
    let when = &input.policy.tom_lite_promotion_policy;
    let r = input.receipt;
    let prev = input
        .previous
        .as_ref()
        .map(|p| json!({"run_id": p["run_id"], "counts": p["counts"], "reasons": p["reasons"]}));
    Ok(json!({
        "run": {
            "run_id": r["run_id"], "started_at": r["started_at"], "finished_at": r["finished_at"],
            "duration_seconds": r["duration_seconds"], "annotator": r["annotator"]["id"],
            "policy_sha256": r["policy_sha256"],
            "inputs": r["inputs"].as_array().map(|a| a.iter().map(|i| json!({"path": i["path"], "records": i["records"]})).collect::<Vec<_>>()),
        },
        "counts": r["counts"],
        "previous": prev,
        "reasons": r["reasons"],
        "personas": personas.iter().map(|(p, c)| json!({"persona_id": p, "promoted": c[0], "quarantined": c[1], "abstained": c[2]})).collect::<Vec<_>>(),
        "thresholds": {
            "tom_kind": when.promote_tags_when.tom_kind_confidence_min,
            "affect": when.promote_tags_when.affect_confidence_min,
            "intensity": when.promote_tags_when.intensity_confidence_min,
            "edge": when.promote_edges_when.edge_confidence_min,
        },
        "histograms": histograms,
        "vocab": {"tom_kind": TOM_KINDS, "affect": AFFECTS, "intensity": INTENSITIES},
        "nodes": input.registry.map(|reg| reg.nodes().iter().map(|n| json!({"id": n.id, "name": n.name})).collect::<Vec<_>>()).unwrap_or_default(),
        "texts": texts,
        "queue": queue,
        "queue_total": queue_total,
        "abstained": abstained,
        "abstained_total": abstained_total,
        "rejects": rejects,
        "rejects_total": rejects_total,
        "failed": r["failed"],
        "poison": r["poison"],
    }))
}

/// The page: the template with the data inline. Every `<`, `>` and `&`
/// of the data is written as a JSON escape, so no record text can close or
/// comment out the script element it sits in.
pub fn html(data: &Value) -> String {
    const SLOT: &str = "__TOMLITE_DATA__";
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    let at = TEMPLATE.find(SLOT).unwrap_or(TEMPLATE.len());
    let mut out = String::with_capacity(TEMPLATE.len() + json.len() + json.len() / 16);
    out.push_str(&TEMPLATE[..at]);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push_str(TEMPLATE.get(at + SLOT.len()..).unwrap_or(""));
    out
}

fn n(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The same run at a glance in Markdown.
pub fn markdown(data: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let run = &data["run"];
    let c = &data["counts"];
    let _ = writeln!(
        s,
        "# tomlite run {}\n",
        run["run_id"].as_str().unwrap_or("")
    );
    let _ = writeln!(
        s,
        "Annotator `{}`, policy `{}`, {:.1} s.\n",
        run["annotator"].as_str().unwrap_or(""),
        &run["policy_sha256"].as_str().unwrap_or("")
            [..12.min(run["policy_sha256"].as_str().unwrap_or("").len())],
        run["duration_seconds"].as_f64().unwrap_or(0.0)
    );
    let prev = &data["previous"];
    let _ = writeln!(s, "| outcome | this run | previous run |\n|---|---:|---:|");
    for k in [
        "records_in",
        "processed",
        "skipped_unchanged",
        "rejected",
        "abstained",
        "promoted_tags",
        "quarantined_tags",
        "promoted_edges",
        "quarantined_edges",
        "quarantined_annotations",
        "memory_links",
        "unknown_mentions",
        "curator_suppressed",
    ] {
        let before = if prev.is_null() {
            "–".to_string()
        } else {
            n(&prev["counts"][k]).to_string()
        };
        let _ = writeln!(s, "| {k} | {} | {before} |", n(&c[k]));
    }
    let _ = writeln!(
        s,
        "\n## Quarantine by reason\n\n| reason | items |\n|---|---:|"
    );
    for (r, v) in data["reasons"].as_object().into_iter().flatten() {
        let _ = writeln!(s, "| {r} | {} |", n(v));
    }
    let _ = writeln!(
        s,
        "\n## By persona\n\n| persona | promoted | quarantined | abstained |\n|---|---:|---:|---:|"
    );
    for p in data["personas"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            p["persona_id"].as_str().unwrap_or(""),
            n(&p["promoted"]),
            n(&p["quarantined"]),
            n(&p["abstained"])
        );
    }
    let queue = data["queue"].as_array().cloned().unwrap_or_default();
    let texts = data["texts"].as_array().cloned().unwrap_or_default();
    let total = n(&data["queue_total"]);
    let _ = writeln!(
        s,
        "\n## Queue ({total} items; the first 200 below, all of them in report.html)\n"
    );
    for q in queue.iter().take(200) {
        let label = q["label"].as_str().unwrap_or("–");
        let conf = q["confidence"]
            .as_f64()
            .map_or("–".to_string(), |c| format!("{c:.2}"));
        let reasons: Vec<&str> = q["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let target = match (q["target_node"].as_str(), q["target_mention"].as_str()) {
            (Some(t), Some(m)) => format!(" → `{t}` (\"{m}\")"),
            (Some(t), None) => format!(" → `{t}`"),
            (None, Some(m)) => format!(" → unknown \"{m}\""),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            s,
            "- **{}** {} `{label}` {conf}{target} — {}",
            q["item_id"].as_str().unwrap_or(""),
            q["item_type"].as_str().unwrap_or(""),
            reasons.join(", ")
        );
        let quote = q["quote"].as_str().unwrap_or("");
        let text = texts
            .get(q["text"].as_u64().unwrap_or(0) as usize)
            .and_then(Value::as_str)
            .unwrap_or("");
        if !quote.is_empty() {
            let _ = writeln!(s, "  > {}", quote.replace('\n', " "));
        } else {
            let short: String = text.chars().take(160).collect();
            let _ = writeln!(s, "  > {}", short.replace('\n', " "));
        }
    }
    let _ = writeln!(
        s,
        "\n{} abstained, {} rejected: see report.html.",
        n(&data["abstained_total"]),
        n(&data["rejects_total"])
    );
    let failed = data["failed"].as_array().map_or(&[][..], Vec::as_slice);
    let poison = data["poison"].as_array().map_or(&[][..], Vec::as_slice);
    if !failed.is_empty() || !poison.is_empty() {
        let _ = writeln!(s, "\n## Failed and poison records\n");
        for p in poison {
            let _ = writeln!(
                s,
                "- `{}` ({}:{}): poison, annotation failed in {} runs of this content (last: run {}); skipped until the record or the annotator changes",
                p["record_id"].as_str().unwrap_or(""),
                p["source"].as_str().unwrap_or(""),
                p["line"],
                p["failures"],
                p["last_failed_run"].as_str().unwrap_or("")
            );
        }
        for f in failed {
            let _ = writeln!(
                s,
                "- `{}` ({}:{}): failed (run {} of {}): {}",
                f["record_id"].as_str().unwrap_or(""),
                f["source"].as_str().unwrap_or(""),
                f["line"],
                f["failures"],
                crate::run::POISON_AFTER,
                f["error"].as_str().unwrap_or("")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_text_cannot_break_out_of_the_data_script() {
        let text = "a </script><!-- <script>alert(1)</script> & b";
        let page = html(&json!({"texts": [text]}));
        assert!(!page.contains("__TOMLITE_DATA__"));
        let open = r#"<script id="tomlite-data" type="application/json">"#;
        let from = page.find(open).unwrap() + open.len();
        let to = from + page[from..].find("</script>").unwrap();
        let back: Value = serde_json::from_str(&page[from..to]).unwrap();
        assert_eq!(back["texts"][0], text);
        assert!(!page[from..to].contains('<'));
    }

    #[test]
    fn quote_offsets_become_utf16_offsets_only_when_verbatim() {
        let t = "🎉 Sam said “hi”.";
        let s = t.find("Sam").unwrap() as u64;
        let e = s + "Sam said".len() as u64;
        // The emoji is 2 UTF-16 units and 4 bytes.
        assert_eq!(
            utf16_span(t, Some(s), Some(e), Some("Sam said")),
            Some((3, 11))
        );
        assert_eq!(utf16_span(t, Some(s + 1), Some(e), Some("Sam said")), None);
        assert_eq!(utf16_span(t, Some(1), Some(3), Some("x")), None);
    }
}
