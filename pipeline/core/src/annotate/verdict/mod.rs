//! The deterministic verdict parser: raw annotator output (an LLM's reply,
//! a script's print-out) → one annotation, by code, not by trust.
//!
//! The cascade, tried in this order, first match wins:
//!
//! 1. **`STRICT`**: the whole text (surrounding whitespace aside) is one JSON
//!    *annotation object*: an object with at least one of the keys `tags`,
//!    `affect`, `intensity`, `edges` or `best_tom_kind`, readable by
//!    [`annotation_from_value`].
//! 2. **`LENIENT-RECOVERY`**: the *last* complete annotation object inside the
//!    text (after prose, inside a code fence, a final object after a draft,
//!    an object wrapped in another one). Braces inside JSON strings do not
//!    count.
//! 3. **`ESCAPE-RECOVERY`**: one of the fixed shapes of [`EscapeShape`], tried
//!    in the order of [`EscapeShape::ALL`]:
//!    - `relaxed_object`: a Python-literal or relaxed-JSON object
//!      (`{'tags': [...], 'affect': None,}`: single quotes, `True`/`False`/`None`,
//!      trailing commas);
//!    - `pipe_line`: the line format
//!      `tom_kind: preference (0.91) | affect: neutral (0.8) | intensity: high (0.7) | quote: "…"`;
//!    - `key_value_block`: consecutive `key: value` lines as in the seed's
//!      ToM-lite examples (`tom_kind: preference` / `affect: neutral` /
//!      `intensity: high` / `source_quote: "…"`, confidences as `(0.91)` or
//!      `tom_kind_confidence: 0.91`);
//!    - `abstain_marker`: a last line `ABSTAIN` or `NO-TOM-SIGNAL`, optionally
//!      `ABSTAIN: best goal (0.42)`: the annotator's explicit abstention.
//! 4. **`ANOMALY`**: nothing above matched. No annotation comes out; the
//!    caller keeps the raw text and quarantines the record with
//!    `unparseable_annotation`. Nothing is guessed.
//!
//! The work is bounded: one linear scan of the text finds every balanced
//! object (strings and escapes tracked, a string ends at a line break as
//! no JSON string holds one), only objects with an annotation key are parsed,
//! and the bytes handed to the JSON parser are capped at
//! [`PARSE_BUDGET_FACTOR`] times the text's length (plus 1 MiB).
//!
//! ```
//! use tomlite_core::annotate::read_as::ParseClass;
//! use tomlite_core::annotate::verdict::parse;
//! let v = parse("Thinking...\n```json\n{\"tags\": [], \"affect\": {\"label\": \"neutral\", \"confidence\": 0.9}}\n```");
//! assert_eq!(v.class, ParseClass::Lenient);
//! assert!(v.annotation.is_some());
//! ```

use serde_json::{Map, Value};

use crate::annotate::read_as::{EscapeShape, ParseClass, ReadAs};
use crate::annotate::{Annotation, annotation_from_value};

mod escape;
mod scan;

use escape::*;
use scan::*;
pub use scan::{ANNOTATION_KEYS, MAX_CANDIDATES, is_annotation_object};

/// Top-level keys the annotation contract knows; others are ignored and noted.
const KNOWN_KEYS: [&str; 8] = [
    "record_id",
    "annotator",
    "tags",
    "affect",
    "intensity",
    "edges",
    "best_tom_kind",
    "best_confidence",
];

/// The JSON parser is given at most this many times the text's length
/// (plus 1 MiB) in candidate bytes, whatever the nesting of the text.
pub const PARSE_BUDGET_FACTOR: usize = 2;

/// The parser's answer for one raw output.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// How the text was read.
    pub class: ParseClass,
    /// The escape-map entry, for [`ParseClass::Escape`].
    pub shape: Option<EscapeShape>,
    /// The annotation object that was read (before [`annotation_from_value`]).
    pub object: Option<Map<String, Value>>,
    /// The annotation; `None` exactly when the class is [`ParseClass::Anomaly`].
    pub annotation: Option<Annotation>,
    /// Where the annotation was found and what was ignored.
    pub notes: Vec<String>,
    /// Why the text is an anomaly.
    pub error: Option<String>,
}

impl Verdict {
    /// The class and shape, as staged.
    pub fn read_as(&self) -> ReadAs {
        ReadAs {
            class: self.class,
            shape: self.shape,
        }
    }

    fn accepted(
        class: ParseClass,
        shape: Option<EscapeShape>,
        object: Map<String, Value>,
        annotation: Annotation,
        mut notes: Vec<String>,
    ) -> Self {
        let unknown: Vec<&str> = object
            .keys()
            .map(String::as_str)
            .filter(|k| !KNOWN_KEYS.contains(k))
            .collect();
        if !unknown.is_empty() {
            notes.push(format!("unknown fields ignored: {}", unknown.join(", ")));
        }
        Verdict {
            class,
            shape,
            object: Some(object),
            annotation: Some(annotation),
            notes,
            error: None,
        }
    }
}

/// Parses one raw annotator output through the cascade.
pub fn parse(raw: &str) -> Verdict {
    let mut errors: Vec<String> = Vec::new();
    if let Some(verdict) = read_strict(raw.trim(), &mut errors) {
        return verdict;
    }
    let budget = raw.len().saturating_mul(PARSE_BUDGET_FACTOR) + (1 << 20);
    let scan = scan_objects(raw.as_bytes(), b"\"");
    if let Some(verdict) = read_lenient(raw, &scan, budget, &mut errors) {
        return verdict;
    }
    if let Some(verdict) = read_escape(raw, budget, &mut errors) {
        return verdict;
    }
    anomaly(raw, &scan, errors)
}

/// Step 1, strict: the whole (trimmed) text is one annotation object.
fn read_strict(text: &str, errors: &mut Vec<String>) -> Option<Verdict> {
    if !(text.starts_with('{') && text.ends_with('}')) {
        return None;
    }
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if !is_annotation_object(&object) {
        return None;
    }
    match annotation_from_value(&object) {
        Ok(annotation) => Some(Verdict::accepted(
            ParseClass::Strict,
            None,
            object,
            annotation,
            Vec::new(),
        )),
        Err(e) => {
            errors.push(format!("the text is an annotation object but {e}"));
            None
        }
    }
}

/// Step 2, lenient: the last complete annotation object, within the candidate
/// and byte budgets.
fn read_lenient(
    raw: &str,
    scan: &Scan,
    budget: usize,
    errors: &mut Vec<String>,
) -> Option<Verdict> {
    // The whole text was already tried as one object by the strict step.
    let whole = (raw.len() - raw.trim_start().len(), raw.trim_end().len());
    let candidates: Vec<&Span> = scan
        .spans
        .iter()
        .rev()
        .filter(|span| span.flagged && (span.start, span.end) != whole)
        .collect();
    let mut spent = 0usize;
    for (tried, span) in candidates.iter().enumerate() {
        if tried >= MAX_CANDIDATES || spent + (span.end - span.start) > budget {
            errors.push(format!(
                "gave up after {tried} candidate objects (parse budget of {budget} bytes)"
            ));
            break;
        }
        spent += span.end - span.start;
        let (start, end) = (span.start, span.end);
        match serde_json::from_str::<Value>(&raw[start..end]) {
            Ok(Value::Object(object)) => match annotation_from_value(&object) {
                Ok(annotation) => {
                    let earlier = candidates.len() - tried - 1;
                    let notes = lenient_notes(raw, scan, span, earlier);
                    return Some(Verdict::accepted(
                        ParseClass::Lenient,
                        None,
                        object,
                        annotation,
                        notes,
                    ));
                }
                Err(e) => errors.push(format!(
                    "the object at bytes [{start}, {end}) is not a valid annotation: {e}"
                )),
            },
            Ok(_) => {}
            Err(e) => {
                if errors.len() < 8 {
                    errors.push(format!(
                        "the object at bytes [{start}, {end}) is not JSON: {e}"
                    ));
                }
            }
        }
    }
    None
}

/// Where the lenient step found its object, and what it ignored around it
/// (`earlier` annotation-like objects before it).
fn lenient_notes(raw: &str, scan: &Scan, span: &Span, earlier: usize) -> Vec<String> {
    let mut notes = vec![format!(
        "annotation object at bytes [{}, {}) of {}",
        span.start,
        span.end,
        raw.len()
    )];
    if earlier > 0 {
        notes.push(format!(
            "{earlier} earlier annotation-like object(s) ignored (a draft?)"
        ));
    }
    if in_code_fence(raw, span.start) {
        notes.push("inside a code fence".into());
    }
    if let Some(open) = scan.unclosed_flagged.iter().find(|&&open| open > span.end) {
        notes.push(format!(
            "an incomplete annotation object starting at byte {open} follows it (truncated?)"
        ));
    }
    notes
}

/// Step 3, escape recovery: the first known escape shape that reads as an
/// annotation.
fn read_escape(raw: &str, budget: usize, errors: &mut Vec<String>) -> Option<Verdict> {
    for shape in EscapeShape::ALL {
        let found = match shape {
            EscapeShape::RelaxedObject => relaxed_object(raw, budget, errors),
            EscapeShape::PipeLine => pipe_line(raw),
            EscapeShape::KeyValueBlock => key_value_block(raw),
            EscapeShape::AbstainMarker => abstain_marker(raw),
        };
        let Some((object, mut notes)) = found else {
            continue;
        };
        match annotation_from_value(&object) {
            Ok(annotation) => {
                notes.insert(0, format!("escape shape {}", shape.as_str()));
                return Some(Verdict::accepted(
                    ParseClass::Escape,
                    Some(shape),
                    object,
                    annotation,
                    notes,
                ));
            }
            Err(e) => errors.push(format!("{} shape: {e}", shape.as_str())),
        }
    }
    None
}

/// Step 4, anomaly: why nothing was read (the first eight errors, and how many
/// more).
fn anomaly(raw: &str, scan: &Scan, mut errors: Vec<String>) -> Verdict {
    if let Some(open) = scan.unclosed_flagged.first() {
        errors.push(format!(
            "an annotation object starts at byte {open} but never closes (truncated JSON?)"
        ));
    }
    if errors.len() > 8 {
        let more = errors.len() - 8;
        errors.truncate(8);
        errors.push(format!("{more} more"));
    }
    let error = if errors.is_empty() {
        format!(
            "no annotation object and no known escape shape in {} bytes of text",
            raw.len()
        )
    } else {
        format!("no readable annotation: {}", errors.join("; "))
    };
    Verdict {
        class: ParseClass::Anomaly,
        shape: None,
        object: None,
        annotation: None,
        notes: Vec::new(),
        error: Some(error),
    }
}

/// Gives every quote that has text but no offsets the offsets of its first
/// verbatim occurrence in `text`; returns how many were anchored. A quote
/// that is not in the text keeps no offsets (and the validator quarantines it).
pub fn anchor_quotes(a: &mut Annotation, text: &str) -> usize {
    let mut n = 0;
    let quotes = a
        .tags
        .iter_mut()
        .map(|t| &mut t.quote)
        .chain(a.edges.iter_mut().map(|e| &mut e.quote));
    for q in quotes {
        if q.start.is_some() || q.end.is_some() {
            continue;
        }
        let Some(t) = q.text.as_deref().filter(|t| !t.is_empty()) else {
            continue;
        };
        if let Some(s) = text.find(t) {
            q.start = Some(s as u64);
            q.end = Some((s + t.len()) as u64);
            n += 1;
        }
    }
    n
}

/// Problems of an annotation against its record's text: every quote that
/// is not verbatim at its offsets, and every field that had the wrong type.
pub fn problems(a: &Annotation, text: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut quote = |what: String, q: &crate::annotate::Quote| {
        if let Some(text) = text
            && !q.is_absent()
            && !q.is_verbatim(text)
        {
            out.push(match q.text.as_deref() {
                Some(t) if !t.is_empty() && !text.contains(t) => {
                    format!("{what}.source_quote: not in the record text")
                }
                _ => format!("{what}.source_quote: not verbatim at its offsets"),
            });
        }
    };
    for (i, t) in a.tags.iter().enumerate() {
        quote(format!("tags[{i}]"), &t.quote);
    }
    for (i, e) in a.edges.iter().enumerate() {
        quote(format!("edges[{i}]"), &e.quote);
    }
    for (i, t) in a.tags.iter().enumerate() {
        out.extend(t.problems.iter().map(|p| format!("tags[{i}].{p}")));
    }
    for (i, e) in a.edges.iter().enumerate() {
        out.extend(e.problems.iter().map(|p| format!("edges[{i}].{p}")));
    }
    for (key, xs) in [("affect", &a.affect), ("intensity", &a.intensity)] {
        for x in xs {
            out.extend(x.problems.iter().map(|p| format!("{key}.{p}")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: &str = r#"{"tags":[{"tom_kind":"preference","confidence":0.91,"source_quote":"Keep it short.","quote_start":0,"quote_end":15}],"affect":{"label":"neutral","confidence":0.8},"intensity":{"label":"medium","confidence":0.7}}"#;

    fn kinds(v: &Verdict) -> Vec<String> {
        v.annotation
            .as_ref()
            .unwrap()
            .tags
            .iter()
            .map(|t| t.tom_kind.clone().unwrap())
            .collect()
    }

    #[test]
    fn strict_is_the_whole_text() {
        let v = parse(&format!("  {STRICT}\n"));
        assert_eq!(v.class, ParseClass::Strict);
        assert_eq!(kinds(&v), ["preference"]);
        assert!(v.notes.is_empty());
    }

    #[test]
    fn lenient_takes_the_last_object_after_prose_and_drafts() {
        let draft = STRICT.replace("preference", "goal");
        let text = format!(
            "Let me think {{about it}}.\nDraft:\n{draft}\nFinal answer:\n```json\n{STRICT}\n```\n"
        );
        let v = parse(&text);
        assert_eq!(v.class, ParseClass::Lenient);
        assert_eq!(kinds(&v), ["preference"]);
        assert!(
            v.notes.iter().any(|n| n.contains("1 earlier")),
            "{:?}",
            v.notes
        );
        assert!(
            v.notes.iter().any(|n| n.contains("code fence")),
            "{:?}",
            v.notes
        );
    }

    #[test]
    fn braces_inside_strings_do_not_count() {
        let text = r#"Answer: {"tags":[{"tom_kind":"goal","confidence":0.9,"source_quote":"a } b { c"}],"affect":{"label":"happy","confidence":0.9}} done"#;
        let v = parse(text);
        assert_eq!(v.class, ParseClass::Lenient);
        assert_eq!(
            v.annotation.unwrap().tags[0].quote.text.as_deref(),
            Some("a } b { c")
        );
    }

    #[test]
    fn a_wrapped_annotation_is_found_inside_its_wrapper() {
        let v = parse(&format!(r#"{{"result": {STRICT}, "ok": true}}"#));
        assert_eq!(v.class, ParseClass::Lenient);
        assert_eq!(kinds(&v), ["preference"]);
    }

    #[test]
    fn truncated_json_is_an_anomaly_that_says_so() {
        let v = parse(&STRICT[..STRICT.len() - 30]);
        assert_eq!(v.class, ParseClass::Anomaly);
        assert!(v.annotation.is_none());
        assert!(
            v.error.as_deref().unwrap().contains("never closes"),
            "{:?}",
            v.error
        );
    }

    #[test]
    fn an_object_with_no_annotation_key_is_not_an_annotation() {
        assert_eq!(parse(r#"{"answer": 42}"#).class, ParseClass::Anomaly);
        assert_eq!(parse("{}").class, ParseClass::Anomaly);
    }

    #[test]
    fn an_annotation_with_a_broken_shape_is_an_anomaly_with_its_error() {
        let v = parse(r#"{"tags": 5}"#);
        assert_eq!(v.class, ParseClass::Anomaly);
        assert!(v.error.unwrap().contains("tags: expected an array"));
    }

    #[test]
    fn unknown_fields_are_noted() {
        let v = parse(r#"{"tags": [], "reasoning": "x", "score": 3}"#);
        assert_eq!(v.class, ParseClass::Strict);
        assert_eq!(v.notes, ["unknown fields ignored: reasoning, score"]);
    }

    #[test]
    fn pipe_line_with_a_pipe_inside_the_quote() {
        let v = parse(
            "Here you go:\ntom_kind: preference (0.91) | affect: neutral (0.8) | intensity: high (0.7) | quote: \"short | sweet\"\n",
        );
        assert_eq!(v.class, ParseClass::Escape);
        assert_eq!(v.shape, Some(EscapeShape::PipeLine));
        let a = v.annotation.unwrap();
        assert_eq!(a.tags[0].confidence, Some(0.91));
        assert_eq!(a.tags[0].quote.text.as_deref(), Some("short | sweet"));
        assert_eq!(a.affect[0].label.as_deref(), Some("neutral"));
        assert_eq!(a.intensity[0].confidence, Some(0.7));
    }

    #[test]
    fn key_value_block_as_in_the_seed() {
        let v = parse(
            "tom_kind: boundary\naffect: angry\nintensity: high\nsource_quote: \"do not create evidence cases directly\"\n",
        );
        assert_eq!(v.shape, Some(EscapeShape::KeyValueBlock));
        let a = v.annotation.unwrap();
        assert_eq!(a.tags[0].tom_kind.as_deref(), Some("boundary"));
        assert_eq!(a.tags[0].confidence, None, "no confidence is invented");
        let v = parse("tom_kind: goal\ntom_kind_confidence: 0.88\naffect: happy (0.9)\n");
        assert_eq!(v.annotation.unwrap().tags[0].confidence, Some(0.88));
    }

    #[test]
    fn relaxed_object_from_a_python_print() {
        let v = parse(
            "{'tags': [{'tom_kind': 'goal', 'confidence': 0.9, 'source_quote': \"I'll run\", 'quote_start': None,}], 'affect': {'label': 'happy', 'confidence': 0.8}, 'ok': True}",
        );
        assert_eq!(v.shape, Some(EscapeShape::RelaxedObject), "{v:?}");
        let a = v.annotation.unwrap();
        assert_eq!(a.tags[0].quote.text.as_deref(), Some("I'll run"));
        assert_eq!(a.tags[0].quote.start, None);
    }

    #[test]
    fn abstain_marker_with_and_without_best() {
        let v = parse("No ToM signal here.\nABSTAIN: best goal (0.42)");
        assert_eq!(v.shape, Some(EscapeShape::AbstainMarker));
        let a = v.annotation.unwrap();
        assert!(a.tags.is_empty());
        assert_eq!(a.best, Some(("goal".into(), 0.42)));
        let v = parse("NO-TOM-SIGNAL");
        assert_eq!(v.shape, Some(EscapeShape::AbstainMarker));
        assert_eq!(v.annotation.unwrap().best, None);
        assert_eq!(parse("I would ABSTAIN here").class, ParseClass::Anomaly);
    }

    #[test]
    fn prose_is_an_anomaly() {
        let v = parse("The user seems to prefer short answers, I think.");
        assert_eq!(v.class, ParseClass::Anomaly);
        assert!(v.error.unwrap().contains("no annotation object"));
    }

    #[test]
    fn anchoring_uses_the_first_verbatim_occurrence_only() {
        let mut a = parse("tom_kind: goal (0.9) | quote: \"run a marathon\"")
            .annotation
            .unwrap();
        assert_eq!(anchor_quotes(&mut a, "I will run a marathon."), 1);
        assert_eq!(
            (a.tags[0].quote.start, a.tags[0].quote.end),
            (Some(7), Some(21))
        );
        let mut b = parse("tom_kind: goal (0.9) | quote: \"swim\"")
            .annotation
            .unwrap();
        assert_eq!(anchor_quotes(&mut b, "I will run a marathon."), 0);
        assert_eq!(b.tags[0].quote.start, None);
    }

    #[test]
    fn ten_megabytes_of_adversarial_braces_stay_bounded() {
        for unit in ["{", "{\"tags\":1}", "{\"tags\": \"}\" ", "} { \" "] {
            let text = unit.repeat(10_000_000 / unit.len());
            let t = std::time::Instant::now();
            let v = parse(&text);
            assert_eq!(v.class, ParseClass::Anomaly, "{unit}");
            assert!(t.elapsed().as_secs() < 20, "{unit}: {:?}", t.elapsed());
        }
    }

    #[test]
    fn deep_nesting_stays_bounded() {
        // 200k nested flagged objects: every one is a candidate, the budget caps the work.
        let n = 200_000;
        let text = format!("{}{}", "{\"tags\":".repeat(n), "}".repeat(n));
        let t = std::time::Instant::now();
        let v = parse(&text);
        assert_eq!(v.class, ParseClass::Anomaly);
        assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
    }
}
