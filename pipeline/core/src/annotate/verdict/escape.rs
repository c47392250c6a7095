//! Reading what is not JSON: a relaxed object (single quotes, bare keys,
//! a Python print), a `tag | confidence | quote` line, a key-value block,
//! and the abstain marker.

use serde_json::{Map, Value};

use super::scan::{MAX_CANDIDATES, is_annotation_object, scan_objects};

/// Escape shape `relaxed_object`: the last object with an annotation key
/// (single- or double-quoted) that reads as JSON once Python/relaxed syntax
/// is rewritten.
pub(super) fn relaxed_object(
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
pub(super) fn relaxed_to_json(s: &str) -> Option<String> {
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
pub(super) enum Field {
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
pub(super) fn confidence_value(s: &str) -> Value {
    let s = s.trim();
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => {
            serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
        }
        _ => Value::String(s.to_string()),
    }
}

/// `label (0.91)` → (`label`, `0.91`); `label` → (`label`, none).
pub(super) fn label_and_confidence(v: &str) -> Option<(String, Option<Value>)> {
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
pub(super) fn quote_value(v: &str) -> String {
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
pub(super) fn field(s: &str) -> Option<Field> {
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
pub(super) fn object_from_fields(fields: &[Field]) -> Option<Map<String, Value>> {
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
pub(super) fn split_pipes(line: &str) -> Vec<&str> {
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
pub(super) fn pipe_line(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
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
pub(super) fn key_value_block(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
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
pub(super) fn abstain_marker(raw: &str) -> Option<(Map<String, Value>, Vec<String>)> {
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
