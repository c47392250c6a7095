//! The run's report for the curator: `report.html` (one self-contained
//! page: the data inline as JSON, drawn and filtered by inline JS, no
//! network) and `report.md` (the same at a glance, for a terminal or a
//! ticket). Both are built from the run's own tables once they are closed,
//! so they show exactly what was staged.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::graph::nodes::Registry;
use crate::rules::policy::Policy;
use crate::stage::read::{self, Columns};
use crate::stage::receipt::Receipt;
use crate::stage::tables::{
    Abstained, PromotedEdges, PromotedTags, Quarantine, Rejects, Sensitive, StagedTable,
};
use crate::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// The page template; `__TOMLITE_DATA__` is replaced by the data.
const TEMPLATE: &str = include_str!("report/report.html");

/// Queue items the page holds at most (it says when it holds fewer): more
/// than a curator works through in a night, and the page stays quick and
/// the run's memory bounded on a million-record night.
pub const MAX_QUEUE_ITEMS: usize = 25_000;
/// Abstained and rejected rows the page lists at most.
pub const MAX_LISTED: usize = 5_000;
/// Records read by a verdict parser's recovery (not `STRICT`) the report
/// lists at most; the counts cover every row.
pub const MAX_RECOVERED: usize = 1_000;

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
    pub receipt: &'a Receipt,
    /// The previous committed run's receipt, if any, as read (a receipt of
    /// any earlier version: only its run id, counts and reasons are shown).
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

/// Streams the rows of the run's table `T` (`columns` of it).
fn each<T: StagedTable>(
    dir: &Path,
    columns: Columns<'_>,
    f: impl FnMut(Map<String, Value>),
) -> Result<(), ReportError> {
    read::each_row::<T>(&dir.join(format!("{}.parquet", T::NAME)), columns, f).map_err(|e| {
        ReportError {
            table: T::NAME.to_string(),
            message: e.to_string(),
        }
    })
}

/// Records whose raw annotator output needed rescue (`--raw-annotations`
/// read as anything but `STRICT`): the first [`MAX_RECOVERED`] records,
/// each once, with how many of their items each outcome holds.
#[derive(Default)]
struct Recovered {
    records: Vec<Value>,
    index: std::collections::HashMap<String, usize>,
}

impl Recovered {
    fn add(&mut self, row: &Map<String, Value>, outcome: &str) {
        let Some(class) = st(row, "parse_class") else {
            return;
        };
        let shape = st(row, "escape_shape");
        if class == crate::annotate::read_as::ParseClass::Strict.as_str() {
            return;
        }
        let id = st(row, "record_id").unwrap_or("");
        let at = match self.index.get(id) {
            Some(&i) => i,
            None if self.records.len() < MAX_RECOVERED => {
                self.records.push(json!({
                    "record_id": id, "persona_id": row.get("persona_id"), "parse_class": class,
                    "escape_shape": shape, "promoted": 0, "quarantined": 0, "abstained": 0,
                }));
                self.index.insert(id.to_string(), self.records.len() - 1);
                self.records.len() - 1
            }
            None => return,
        };
        let r = &mut self.records[at][outcome];
        *r = json!(r.as_u64().unwrap_or(0) + 1);
    }
}

/// The page's data (see the template for how it is drawn). Tables are
/// streamed: the queue keeps its first [`MAX_QUEUE_ITEMS`] items, the
/// counts, histograms and personas cover every row.
pub fn data(input: &ReportInput<'_>) -> Result<Value, ReportError> {
    let dir = input.dir;
    // Sensitive records first: safety records head the report, and every
    // queue item of a sensitive record carries its category (or flag).
    let mut safety = Vec::new();
    let mut safety_total = 0usize;
    let mut sensitive_of: std::collections::HashMap<String, String> = Default::default();
    each::<Sensitive>(dir, Columns::All, |r| {
        let id = st(&r, "record_id").unwrap_or("").to_string();
        let flags: Vec<&str> = r
            .get("flags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let label = match st(&r, "category") {
            Some(c) => c.to_string(),
            None => format!("flag:{}", flags.join(",")),
        };
        if r.get("safety").and_then(Value::as_u64) == Some(1) {
            safety_total += 1;
            if safety.len() < MAX_LISTED {
                safety.push(json!({
                    "record_id": id, "persona_id": r.get("persona_id"), "record_kind": r.get("record_kind"),
                    "source_path": r.get("source_path"), "category": r.get("category"), "flags": flags,
                    "confidence": r.get("confidence"), "detector": r.get("detector"), "quote": r.get("quote"),
                    "quote_start": r.get("quote_start"), "quote_end": r.get("quote_end"),
                }));
            }
        }
        if sensitive_of.len() < MAX_QUEUE_ITEMS {
            sensitive_of.insert(id, label);
        }
    })?;
    let mut recovered = Recovered::default();
    let mut hist: BTreeMap<&str, [Vec<f64>; 2]> = BTreeMap::new();
    let mut personas: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    let mut push = |head: &'static str, which: usize, v: Option<f64>| {
        if let Some(v) = v {
            hist.entry(head).or_default()[which].push(v);
        }
    };
    each::<PromotedTags>(
        dir,
        Columns::Only(&[
            "persona_id",
            "tom_kind_confidence",
            "affect_confidence",
            "intensity_confidence",
            "record_id",
            "parse_class",
            "escape_shape",
        ]),
        |r| {
            recovered.add(&r, "promoted");
            push("tom_kind", 0, f(&r, "tom_kind_confidence"));
            push("affect", 0, f(&r, "affect_confidence"));
            push("intensity", 0, f(&r, "intensity_confidence"));
            personas
                .entry(st(&r, "persona_id").unwrap_or("").to_string())
                .or_default()[0] += 1;
        },
    )?;
    each::<PromotedEdges>(
        dir,
        Columns::Only(&[
            "persona_id",
            "confidence",
            "record_id",
            "parse_class",
            "escape_shape",
        ]),
        |r| {
            recovered.add(&r, "promoted");
            push("edge", 0, f(&r, "confidence"));
            personas
                .entry(st(&r, "persona_id").unwrap_or("").to_string())
                .or_default()[0] += 1;
        },
    )?;
    let mut texts: Vec<String> = Vec::new();
    let mut text_ix: BTreeMap<String, usize> = BTreeMap::new();
    let mut queue = Vec::new();
    let mut queue_total = 0usize;
    each::<Quarantine>(dir, Columns::All, |q| {
        queue_total += 1;
        recovered.add(&q, "quarantined");
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
            "parse_class": q.get("parse_class"), "escape_shape": q.get("escape_shape"),
            "sensitive": st(&q, "record_id").and_then(|id| sensitive_of.get(id)),
        }));
    })?;
    let mut abstained = Vec::new();
    let mut abstained_total = 0usize;
    each::<Abstained>(dir, Columns::All, |a| {
        abstained_total += 1;
        recovered.add(&a, "abstained");
        personas
            .entry(st(&a, "persona_id").unwrap_or("").to_string())
            .or_default()[2] += 1;
        if abstained.len() < MAX_LISTED {
            abstained.push(Value::Object(a));
        }
    })?;
    let mut rejects = Vec::new();
    let mut rejects_total = 0usize;
    each::<Rejects>(dir, Columns::All, |x| {
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
            "run_id": r.run_id, "started_at": r.started_at, "finished_at": r.finished_at,
            "duration_seconds": r.duration_seconds, "annotator": r.annotator.id,
            "policy_sha256": r.policy_sha256,
            "inputs": r.inputs.iter().map(|i| json!({"path": i.path, "records": i.records})).collect::<Vec<_>>(),
        },
        "counts": r.counts,
        "sensitive": r.sensitive,
        "safety": safety,
        "safety_total": safety_total,
        "previous": prev,
        "reasons": r.reasons,
        "personas": personas.iter().map(|(p, c)| json!({"persona_id": p, "promoted": c[0], "quarantined": c[1], "abstained": c[2]})).collect::<Vec<_>>(),
        "thresholds": {
            "tom_kind": when.promote_tags_when.tom_kind_confidence_min,
            "affect": when.promote_tags_when.affect_confidence_min,
            "intensity": when.promote_tags_when.intensity_confidence_min,
            "edge": when.promote_edges_when.edge_confidence_min,
        },
        "histograms": histograms,
        "vocab": {"tom_kind": TOM_KINDS, "affect": AFFECTS, "intensity": INTENSITIES},
        // `[id, name]` per node: the page's relabel search runs over them.
        "nodes": input.registry.map(|reg| reg.nodes().iter().map(|n| json!([n.id, n.name])).collect::<Vec<_>>()).unwrap_or_default(),
        "texts": texts,
        "queue": queue,
        "queue_total": queue_total,
        "abstained": abstained,
        "abstained_total": abstained_total,
        "rejects": rejects,
        "rejects_total": rejects_total,
        "failed": r.failed,
        "poison": r.poison,
        "parse_classes": r.annotator.stats["raw_annotations"]["parse_classes"],
        "escape_shapes": r.annotator.stats["raw_annotations"]["escape_shapes"],
        "recovered": recovered.records,
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

/// Whether a character must not reach a terminal as itself: every control
/// character (C0 with ESC and the line breaks, DEL, C1 with the 8-bit CSI
/// and OSC), the line and paragraph separators, and the bidirectional
/// marks and overrides that make a line read other than it is.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Record-derived text made inert: each [`unsafe_char`] is written as a
/// visible `\u{..}` escape, so `cat report.md` cannot clear the screen, set
/// the window title or write the clipboard, and no value starts a line.
/// With `breaks_as_spaces`, line breaks and tabs become spaces instead.
/// With `markdown`, each character that Markdown reads as markup
/// (emphasis, code, links, HTML, a table's `|`, the backslash itself) is
/// escaped with a backslash.
fn visible(s: &str, breaks_as_spaces: bool, markdown: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    let mut prev = ' ';
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if breaks_as_spaces && matches!(c, '\n' | '\r' | '\t' | '\u{2028}' | '\u{2029}') {
            out.push(' ');
        } else if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            // An `_` inside a word (`key_value_block`) is no emphasis.
            let intraword = c == '_'
                && prev.is_alphanumeric()
                && chars.peek().is_some_and(|n| n.is_alphanumeric());
            if markdown
                && !intraword
                && matches!(
                    c,
                    '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '&'
                )
            {
                out.push('\\');
            }
            out.push(c);
        }
        prev = c;
    }
    out
}

/// Record-derived text in running Markdown or a table cell.
fn md(s: &str) -> String {
    visible(s, false, true)
}

/// Record-derived text as a whole line's content (after `> `): line breaks
/// as spaces, leading blanks dropped, markup escaped, and a construct that
/// only counts at the start of a line (`#` heading, `-`/`+` list, `=`
/// underline, `1.` numbered list) escaped.
fn md_line(s: &str) -> String {
    let mut out = visible(s.trim_start(), true, true);
    let digits = out.chars().take_while(char::is_ascii_digit).count();
    if out.starts_with(['#', '-', '+', '=', '~']) {
        out.insert(0, '\\');
    } else if digits > 0 && out[digits..].starts_with(['.', ')']) {
        out.insert(digits, '\\');
    }
    out
}

/// Record-derived text as a code span: [`visible`], fenced with one more
/// backtick than the longest run of backticks inside it.
fn code(s: &str) -> String {
    let v = visible(s, false, false);
    let mut longest = 0;
    let mut run = 0;
    for c in v.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if longest > 0 { " " } else { "" };
    format!("{fence}{pad}{v}{pad}{fence}")
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
        md(run["run_id"].as_str().unwrap_or(""))
    );
    // Safety records before anything else.
    let safety = data["safety"].as_array().map_or(&[][..], Vec::as_slice);
    if !safety.is_empty() {
        let total = n(&data["safety_total"]);
        let _ = writeln!(
            s,
            "## Safety records\n\n{total} safety records (detected `mental_health_self_harm` or flagged `safety`): every tag and edge of them is quarantined. Read these first.\n\n\
             | record | persona | category / flag | confidence | quote |\n|---|---|---|---:|---|"
        );
        for r in safety.iter().take(200) {
            let flags: Vec<String> = r["flags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|f| format!("flag {}", md(f)))
                .collect();
            let mut what: Vec<String> = r["category"].as_str().map(md).into_iter().collect();
            what.extend(flags);
            let quote = match (
                r["quote"].as_str(),
                r["quote_start"].as_u64(),
                r["quote_end"].as_u64(),
            ) {
                (Some(q), Some(a), Some(b)) => {
                    format!("\"{}\" at bytes [{a}, {b})", visible(q, true, true))
                }
                (Some(q), _, _) => format!("\"{}\"", visible(q, true, true)),
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {quote} |",
                code(r["record_id"].as_str().unwrap_or("")),
                md(r["persona_id"].as_str().unwrap_or("")),
                what.join(", "),
                r["confidence"]
                    .as_f64()
                    .map_or("–".to_string(), |c| format!("{c:.2}"))
            );
        }
        if safety.len() > 200 {
            let _ = writeln!(s, "\n(the first 200 listed; all of them in report.html)");
        }
        let _ = writeln!(s);
    }
    let policy: String = run["policy_sha256"]
        .as_str()
        .unwrap_or("")
        .chars()
        .take(12)
        .collect();
    let _ = writeln!(
        s,
        "Annotator {}, policy {}, {:.1} s.\n",
        code(run["annotator"].as_str().unwrap_or("")),
        code(&policy),
        run["duration_seconds"].as_f64().unwrap_or(0.0)
    );
    let sens = &data["sensitive"];
    if n(&sens["records"]) > 0 {
        let cats: Vec<String> = sens["by_category"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{} {}", md(k), n(v)))
            .collect();
        let _ = writeln!(
            s,
            "{} sensitive records ({} safety): {} flagged by their producer; detected: {}.\n",
            n(&sens["records"]),
            n(&sens["safety_records"]),
            n(&sens["flagged"]),
            if cats.is_empty() {
                "none".to_string()
            } else {
                cats.join(", ")
            }
        );
    }
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
        let _ = writeln!(s, "| {} | {} |", md(r), n(v));
    }
    let _ = writeln!(
        s,
        "\n## By persona\n\n| persona | promoted | quarantined | abstained |\n|---|---:|---:|---:|"
    );
    for p in data["personas"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            md(p["persona_id"].as_str().unwrap_or("")),
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
        let label = code(q["label"].as_str().unwrap_or("–"));
        let conf = q["confidence"]
            .as_f64()
            .map_or("–".to_string(), |c| format!("{c:.2}"));
        let reasons: Vec<String> = q["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(md)
            .collect();
        let target = match (q["target_node"].as_str(), q["target_mention"].as_str()) {
            (Some(t), Some(m)) => format!(" → {} (\"{}\")", code(t), md(m)),
            (Some(t), None) => format!(" → {}", code(t)),
            (None, Some(m)) => format!(" → unknown \"{}\"", md(m)),
            (None, None) => String::new(),
        };
        let read_as = match (q["parse_class"].as_str(), q["escape_shape"].as_str()) {
            (Some(c), Some(sh)) => format!(" · read as {} ({})", md(c), md(sh)),
            (Some(c), None) => format!(" · read as {}", md(c)),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "- **{}** {} {label} {conf}{target} — {}{read_as}",
            md(q["item_id"].as_str().unwrap_or("")),
            md(q["item_type"].as_str().unwrap_or("")),
            reasons.join(", ")
        );
        let quote = q["quote"].as_str().unwrap_or("");
        let text = texts
            .get(q["text"].as_u64().unwrap_or(0) as usize)
            .and_then(Value::as_str)
            .unwrap_or("");
        if !quote.is_empty() {
            let _ = writeln!(s, "  > {}", md_line(quote));
        } else {
            let short: String = text.chars().take(160).collect();
            let _ = writeln!(s, "  > {}", md_line(&short));
        }
    }
    if let Some(classes) = data["parse_classes"].as_object() {
        let _ = writeln!(
            s,
            "\n## Raw annotations by parse class\n\n| parse class | lines |\n|---|---:|"
        );
        for (k, v) in classes {
            let _ = writeln!(s, "| {} | {} |", md(k), n(v));
        }
        for (k, v) in data["escape_shapes"].as_object().into_iter().flatten() {
            let _ = writeln!(s, "| ESCAPE-RECOVERY: {} | {} |", md(k), n(v));
        }
        let recovered = data["recovered"].as_array().map_or(&[][..], Vec::as_slice);
        if !recovered.is_empty() {
            let _ = writeln!(
                s,
                "\nRecords whose annotation needed rescue ({} listed; every table row says how its record was read in `parse_class` and `escape_shape`):\n\n\
                 | record | persona | parse class | escape shape | promoted | quarantined | abstained |\n\
                 |---|---|---|---|---:|---:|---:|",
                recovered.len().min(200)
            );
            for r in recovered.iter().take(200) {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    md(r["record_id"].as_str().unwrap_or("")),
                    md(r["persona_id"].as_str().unwrap_or("")),
                    md(r["parse_class"].as_str().unwrap_or("")),
                    md(r["escape_shape"].as_str().unwrap_or("–")),
                    n(&r["promoted"]),
                    n(&r["quarantined"]),
                    n(&r["abstained"])
                );
            }
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
                "- {} ({}:{}): poison, annotation failed in {} runs of this content (last: run {}); skipped until the record or the annotator changes",
                code(p["record_id"].as_str().unwrap_or("")),
                md(p["source"].as_str().unwrap_or("")),
                p["line"],
                p["failures"],
                md(p["last_failed_run"].as_str().unwrap_or(""))
            );
        }
        for f in failed {
            let _ = writeln!(
                s,
                "- {} ({}:{}): failed (run {} of {}): {}",
                code(f["record_id"].as_str().unwrap_or("")),
                md(f["source"].as_str().unwrap_or("")),
                f["line"],
                f["failures"],
                tomlite_staging::retry::POISON_AFTER,
                md(f["error"].as_str().unwrap_or(""))
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

    // report.md passed terminal escapes and Markdown from record data through.
    #[test]
    fn markdown_values_are_inert_in_a_terminal_and_in_markdown() {
        assert_eq!(md("a\u{1b}]52;c;eA==\u{7}b"), "a\\u{1b}\\]52;c;eA==\\u{7}b");
        assert_eq!(md("x\u{9b}2J\u{7f}"), "x\\u{9b}2J\\u{7f}");
        assert_eq!(md("r1\n## Forged"), "r1\\u{a}## Forged");
        assert_eq!(md("ada | 9 |"), "ada \\| 9 \\|");
        assert_eq!(md("a\\|b"), "a\\\\\\|b");
        assert_eq!(md("**x** `y` <b>"), "\\*\\*x\\*\\* \\`y\\` \\<b\\>");
        assert_eq!(md("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(md("key_value_block _x_"), "key_value_block \\_x\\_");
        assert_eq!(md_line("  # Title\r\n- item"), "\\# Title  - item");
        assert_eq!(md_line("- a"), "\\- a");
        assert_eq!(md_line("12. b"), "12\\. b");
        assert_eq!(md_line("Plain text."), "Plain text.");
        assert_eq!(code("r-1"), "`r-1`");
        assert_eq!(code("a`b"), "`` a`b ``");
        assert_eq!(code("a\u{1b}[2Jb"), "`a\\u{1b}[2Jb`");
    }

    // The relabel menu listed every node on every edge card (100k nodes x
    // 10 cards = 1M <option>s): an edge relabels through a search box over
    // one shared, filtered list.
    #[test]
    fn node_relabel_is_one_shared_search_list_not_a_menu_per_card() {
        assert_eq!(TEMPLATE.matches(r#"<datalist id="node-list">"#).count(), 1);
        let card = &TEMPLATE[TEMPLATE.find("function relabelControl").unwrap()..];
        let card = &card[..card.find("\n}\n").unwrap()];
        assert!(card.contains(r#"list="node-list""#), "{card}");
        assert!(
            !card.contains("nodes."),
            "the card iterates the registry: {card}"
        );
        let suggest = &TEMPLATE[TEMPLATE.find("function suggestNodes").unwrap()..];
        assert!(suggest.contains("NODE_SUGGESTIONS"));
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
