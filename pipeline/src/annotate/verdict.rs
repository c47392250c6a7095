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
//! use tomlite::annotate::read_as::ParseClass;
//! use tomlite::annotate::verdict::parse;
//! let v = parse("Thinking...\n```json\n{\"tags\": [], \"affect\": {\"label\": \"neutral\", \"confidence\": 0.9}}\n```");
//! assert_eq!(v.class, ParseClass::Lenient);
//! assert!(v.annotation.is_some());
//! ```

use serde_json::{Map, Value};

use crate::annotate::read_as::{EscapeShape, ParseClass, ReadAs};
use crate::annotate::{Annotation, annotation_from_value};

/// Top-level keys that make a JSON object an annotation object.
pub const ANNOTATION_KEYS: [&str; 5] = ["tags", "affect", "intensity", "edges", "best_tom_kind"];

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

/// At most this many candidate objects are handed to the JSON parser per stage.
pub const MAX_CANDIDATES: usize = 256;

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

/// Whether `m` has at least one of [`ANNOTATION_KEYS`].
pub fn is_annotation_object(m: &Map<String, Value>) -> bool {
    ANNOTATION_KEYS.iter().any(|k| m.contains_key(*k))
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

/// A balanced `{…}` span of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    /// A key of [`ANNOTATION_KEYS`] sits directly in this object.
    flagged: bool,
}

/// Open objects tracked at once; deeper (older) ones are forgotten, as the
/// JSON parser would refuse such nesting anyway.
const MAX_OPEN: usize = 1024;

#[derive(Debug, Default)]
struct Scan {
    /// Closed flagged spans, in the order they close.
    spans: Vec<Span>,
    /// Starts of flagged objects that never close.
    unclosed_flagged: Vec<usize>,
}

/// One pass over `text`: every balanced object, with string state tracked
/// inside objects (`quotes` are the string delimiters). Outside any object
/// quotes are prose and ignored; a line break ends a string.
fn scan_objects(text: &[u8], quotes: &[u8]) -> Scan {
    let mut scan = Scan::default();
    let mut stack: std::collections::VecDeque<(usize, bool)> = std::collections::VecDeque::new();
    let mut string: Option<(u8, usize)> = None;
    let mut escaped = false;
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if let Some((q, from)) = string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'\n' {
                string = None;
            } else if b == q {
                string = None;
                // A key of the innermost object?
                if let Some(top) = stack.back_mut()
                    && !top.1
                    && ANNOTATION_KEYS
                        .iter()
                        .any(|k| k.as_bytes() == &text[from..i])
                    && next_is_colon(text, i + 1)
                {
                    top.1 = true;
                }
            }
            i += 1;
            continue;
        }
        match b {
            b'{' => {
                if stack.len() == MAX_OPEN
                    && let Some((start, true)) = stack.pop_front()
                {
                    scan.unclosed_flagged.push(start);
                }
                stack.push_back((i, false));
            }
            b'}' => {
                if let Some((start, flagged)) = stack.pop_back()
                    && flagged
                {
                    scan.spans.push(Span {
                        start,
                        end: i + 1,
                        flagged,
                    });
                }
            }
            _ if !stack.is_empty() && quotes.contains(&b) => string = Some((b, i + 1)),
            _ => {}
        }
        i += 1;
    }
    scan.unclosed_flagged
        .extend(stack.into_iter().filter(|s| s.1).map(|s| s.0));
    scan
}

/// Whether the next non-blank byte (within 8) after `i` is a colon.
fn next_is_colon(text: &[u8], i: usize) -> bool {
    text[i.min(text.len())..]
        .iter()
        .take(8)
        .find(|b| !matches!(b, b' ' | b'\t'))
        == Some(&b':')
}

/// Whether byte `at` lies inside a ``` fence (an odd number of fence lines before it).
fn in_code_fence(text: &str, at: usize) -> bool {
    text[..at]
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 1
}

/// Escape shape `relaxed_object`: the last object with an annotation key
/// (single- or double-quoted) that reads as JSON once Python/relaxed syntax
/// is rewritten.
fn relaxed_object(
    raw: &str,
    budget: usize,
    errors: &mut Vec<String>,
) -> Option<(Map<String, Value>, Vec<String>)> {
    let scan = scan_objects(raw.as_bytes(), b"\"'");
    let mut spent = 0usize;
    for (tried, span) in scan.spans.iter().rev().filter(|s| s.flagged).enumerate() {
        if tried >= MAX_CANDIDATES || spent + (span.end - span.start) > budget {
            break;
        }
        spent += span.end - span.start;
        let Some(json) = relaxed_to_json(&raw[span.start..span.end]) else {
            continue;
        };
        match serde_json::from_str::<Value>(&json) {
            Ok(Value::Object(m)) if is_annotation_object(&m) => {
                return Some((
                    m,
                    vec![format!(
                        "relaxed object at bytes [{}, {}) of {}",
                        span.start,
                        span.end,
                        raw.len()
                    )],
                ));
            }
            Ok(_) => {}
            Err(e) => {
                if errors.len() < 8 {
                    errors.push(format!(
                        "relaxed_object shape: the object at bytes [{}, {}) does not read: {e}",
                        span.start, span.end
                    ));
                }
            }
        }
    }
    None
}

/// Rewrites a relaxed object as JSON: `'…'` strings become `"…"`,
/// `True`/`False`/`None` become `true`/`false`/`null`, trailing commas go.
/// `None` when the text has an unterminated string.
fn relaxed_to_json(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' | '\'' => {
                out.push('"');
                let mut closed = false;
                while let Some((_, d)) = chars.next() {
                    match d {
                        '\\' => {
                            let (_, e) = chars.next()?;
                            if e == '\'' {
                                out.push('\'');
                            } else {
                                out.push('\\');
                                out.push(e);
                            }
                        }
                        d if d == c => {
                            closed = true;
                            break;
                        }
                        '"' => out.push_str("\\\""),
                        '\n' => return None,
                        d => out.push(d),
                    }
                }
                if !closed {
                    return None;
                }
                out.push('"');
            }
            ',' => {
                let rest = s[i + 1..].trim_start();
                if !(rest.starts_with('}') || rest.starts_with(']')) {
                    out.push(',');
                }
            }
            c if c.is_ascii_alphabetic() => {
                let mut word = String::from(c);
                while let Some(&(_, d)) = chars.peek() {
                    if d.is_ascii_alphanumeric() || d == '_' {
                        word.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push_str(match word.as_str() {
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    w => w,
                });
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// One `key: value` field of the line shapes.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// `tom_kind: label (conf)`.
    TomKind(String, Option<Value>),
    /// `affect: label (conf)`.
    Affect(String, Option<Value>),
    /// `intensity: label (conf)`.
    Intensity(String, Option<Value>),
    /// `quote: "…"` / `source_quote: "…"`.
    Quote(String),
    /// `tom_kind_confidence: 0.9` / `confidence: 0.9` (applies to the last tom_kind).
    TomKindConfidence(Value),
    /// `affect_confidence: 0.9`.
    AffectConfidence(Value),
    /// `intensity_confidence: 0.9`.
    IntensityConfidence(Value),
}

/// A confidence as written: a number when it reads as one, else the text
/// (which the validator reports as a mistyped confidence).
fn confidence_value(s: &str) -> Value {
    let s = s.trim();
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => {
            serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
        }
        _ => Value::String(s.to_string()),
    }
}

/// `label (0.91)` → (`label`, `0.91`); `label` → (`label`, none).
fn label_and_confidence(v: &str) -> Option<(String, Option<Value>)> {
    let v = v.trim();
    let (label, conf) = match v.strip_suffix(')').and_then(|x| x.rsplit_once('(')) {
        Some((label, conf)) => (label.trim(), Some(confidence_value(conf))),
        None => (v, None),
    };
    let label = label.trim_matches(|c| c == '"' || c == '\'' || c == '`');
    // A label is one word of the vocabulary's shape: no blanks, no punctuation but _ and -.
    if label.is_empty()
        || !label
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    {
        return None;
    }
    Some((label.to_string(), conf))
}

/// A quoted (or bare) quote value: JSON-unescaped when double-quoted.
fn quote_value(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
        if let Ok(s) = serde_json::from_str::<String>(v) {
            return s;
        }
        return v[1..v.len() - 1].to_string();
    }
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        return v[1..v.len() - 1].to_string();
    }
    v.to_string()
}

/// Reads `key: value`; `None` when the key is not one of the shapes' keys
/// or the value does not have the key's form.
fn field(s: &str) -> Option<Field> {
    let (key, value) = s.split_once(':')?;
    let key = key
        .trim()
        .trim_start_matches(['-', '*', ' '])
        .trim_matches('`')
        .to_ascii_lowercase();
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    Some(match key.as_str() {
        "tom_kind" => {
            let (l, c) = label_and_confidence(value)?;
            Field::TomKind(l, c)
        }
        "affect" => {
            let (l, c) = label_and_confidence(value)?;
            Field::Affect(l, c)
        }
        "intensity" => {
            let (l, c) = label_and_confidence(value)?;
            Field::Intensity(l, c)
        }
        "quote" | "source_quote" => Field::Quote(quote_value(value)),
        "tom_kind_confidence" | "confidence" => Field::TomKindConfidence(confidence_value(value)),
        "affect_confidence" => Field::AffectConfidence(confidence_value(value)),
        "intensity_confidence" => Field::IntensityConfidence(confidence_value(value)),
        _ => return None,
    })
}

/// Builds the annotation object of the line shapes: each tom_kind is a tag
/// carrying the quote; affect and intensity are the record's.
fn object_from_fields(fields: &[Field]) -> Option<Map<String, Value>> {
    let mut tags: Vec<Map<String, Value>> = Vec::new();
    let mut affect: Vec<Map<String, Value>> = Vec::new();
    let mut intensity: Vec<Map<String, Value>> = Vec::new();
    let mut quote: Option<String> = None;
    let scored = |l: &str, c: &Option<Value>| {
        let mut m = Map::new();
        m.insert("label".into(), Value::from(l));
        m.insert("confidence".into(), c.clone().unwrap_or(Value::Null));
        m
    };
    for f in fields {
        match f {
            Field::TomKind(l, c) => {
                let mut m = Map::new();
                m.insert("tom_kind".into(), Value::from(l.as_str()));
                m.insert("confidence".into(), c.clone().unwrap_or(Value::Null));
                tags.push(m);
            }
            Field::Affect(l, c) => affect.push(scored(l, c)),
            Field::Intensity(l, c) => intensity.push(scored(l, c)),
            Field::Quote(q) => quote = Some(q.clone()),
            Field::TomKindConfidence(c) => {
                tags.last_mut()?.insert("confidence".into(), c.clone());
            }
            Field::AffectConfidence(c) => {
                affect.last_mut()?.insert("confidence".into(), c.clone());
            }
            Field::IntensityConfidence(c) => {
                intensity.last_mut()?.insert("confidence".into(), c.clone());
            }
        }
    }
    if tags.is_empty() {
        return None;
    }
    if let Some(q) = &quote {
        for t in &mut tags {
            t.insert("source_quote".into(), Value::from(q.as_str()));
        }
    }
    let mut m = Map::new();
    m.insert(
        "tags".into(),
        Value::Array(tags.into_iter().map(Value::Object).collect()),
    );
    for (key, xs) in [("affect", affect), ("intensity", intensity)] {
        match xs.len() {
            0 => {}
            1 => {
                m.insert(key.into(), Value::Object(xs.into_iter().next()?));
            }
            _ => {
                m.insert(
                    key.into(),
                    Value::Array(xs.into_iter().map(Value::Object).collect()),
                );
            }
        }
    }
    Some(m)
}

/// Splits on `|` outside double-quoted text.
fn split_pipes(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut from, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '|' if !quoted => {
                parts.push(&line[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&line[from..]);
    parts
}

/// Escape shape `pipe_line`: the last line made only of `|`-separated
/// known fields, one of them a tom_kind.
fn pipe_line(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
    for (n, line) in raw
        .lines()
        .enumerate()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        let line = line.trim().trim_matches('`').trim();
        if !line.contains('|') {
            continue;
        }
        let parts = split_pipes(line);
        let fields: Option<Vec<Field>> = parts
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| field(p))
            .collect();
        if let Some(fields) = fields
            && fields.len() >= 2
            && let Some(m) = object_from_fields(&fields)
        {
            return Some((m, vec![format!("pipe line at line {}", n + 1)]));
        }
    }
    None
}

/// Escape shape `key_value_block`: the last run of at least two
/// consecutive known `key: value` lines with a tom_kind among them.
fn key_value_block(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
    let lines: Vec<&str> = raw.lines().collect();
    let mut end = lines.len();
    while end > 0 {
        // Skip lines that are not fields.
        while end > 0 && field(lines[end - 1].trim()).is_none() {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && field(lines[start - 1].trim()).is_some() {
            start -= 1;
        }
        if end - start >= 2 {
            let fields: Vec<Field> = lines[start..end]
                .iter()
                .filter_map(|l| field(l.trim()))
                .collect();
            if let Some(m) = object_from_fields(&fields) {
                return Some((
                    m,
                    vec![format!("key: value lines {} to {}", start + 1, end)],
                ));
            }
        }
        end = start;
    }
    None
}

/// Escape shape `abstain_marker`: the last non-blank line is `ABSTAIN` or
/// `NO-TOM-SIGNAL`, optionally followed by `: best <tom_kind> (<conf>)` or
/// `: <reason>`.
fn abstain_marker(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
    let last = raw.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let last = last.trim_matches('`').trim();
    let (marker, rest) = match last.split_once(':') {
        Some((m, r)) => (m.trim(), Some(r.trim())),
        None => (last, None),
    };
    if marker != "ABSTAIN" && marker != "NO-TOM-SIGNAL" {
        return None;
    }
    let mut m = Map::new();
    m.insert("tags".into(), Value::Array(Vec::new()));
    let mut notes = vec![format!("marker {marker}")];
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        match rest.strip_prefix("best ").and_then(label_and_confidence) {
            Some((kind, Some(Value::Number(c)))) => {
                m.insert("best_tom_kind".into(), Value::from(kind));
                m.insert("best_confidence".into(), Value::Number(c));
            }
            _ => notes.push(format!("reason: {rest}")),
        }
    }
    Some((m, notes))
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
