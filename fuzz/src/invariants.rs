//! What the JSONL record parser ([`tomlite::ingest::jsonl::jsonl_items`]) must
//! hold to on any bytes at all. Shared, by path, between the fuzz target
//! and the stable test that replays the committed corpus, so both check the
//! same thing.

use serde_json::Value;
use tomlite::ingest::bytes::{UTF8_BOM, binary_format};
use tomlite::ingest::jsonl::{jsonl_items, line_cap};
use tomlite::ingest::record::{FLAGS, IngestOptions, Item, RECORD_FIELDS, RecordKind};

/// The name every item must carry as its source.
const SOURCE: &str = "fuzz.jsonl";

/// One line as the parser sees it: 1-based number and bytes without `\n`.
struct Line<'a> {
    number: u64,
    bytes: &'a [u8],
}

/// The bytes the parser reads as lines: a UTF-8 byte order mark at the
/// start is not part of the first line.
fn text(data: &[u8]) -> &[u8] {
    data.strip_prefix(UTF8_BOM).unwrap_or(data)
}

/// Splits like the parser's reader (after [`text`]): on `\n`; a last line
/// without one counts.
fn lines(data: &[u8]) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut rest = text(data);
    let mut number = 0;
    while !rest.is_empty() {
        number += 1;
        let (bytes, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        out.push(Line { number, bytes });
        rest = next;
    }
    out
}

/// Parses `data` twice, with the default limits and with tiny ones (16-byte
/// texts, 96-byte lines, so that the over-long paths run on small inputs),
/// and checks every invariant; panics naming the one that broke.
pub fn check_jsonl(data: &[u8]) {
    let default = IngestOptions::default();
    let tiny = IngestOptions {
        max_text_bytes: 16,
        ..Default::default()
    };
    let big = check_with(data, &default, line_cap(&default));
    let small = check_with(data, &tiny, 96);
    // Tighter limits can only turn records into rejects, never the reverse;
    // the one line that only they report is a long blank one (too long for
    // them, blank for the default limits).
    let lines = lines(data);
    for (line, is_record) in &small {
        match big.iter().find(|(l, _)| l == line) {
            Some((_, wide)) => assert!(
                !is_record || *wide,
                "line {line} is a record under tight limits but a reject under the default ones"
            ),
            None => assert!(
                !is_record
                    && lines
                        .iter()
                        .find(|l| l.number == *line)
                        .is_some_and(|l| l.bytes.iter().all(u8::is_ascii_whitespace)),
                "line {line} yields an item under the tight limits only"
            ),
        }
    }
    for (line, _) in &big {
        assert!(
            small.iter().any(|(l, _)| l == line),
            "line {line} yields an item under the default limits only"
        );
    }
}

/// Parses `data` as the input [`SOURCE`] with these limits.
pub fn parse(data: &[u8], opts: &IngestOptions, cap: usize) -> Vec<Item> {
    jsonl_items(data, SOURCE.as_ref(), opts, cap)
        .collect::<Result<_, _>>()
        .expect("an in-memory input has no I/O error")
}

/// Checks one parse; returns each item's line and whether it is a record.
fn check_with(data: &[u8], opts: &IngestOptions, cap: usize) -> Vec<(u64, bool)> {
    check_items(data, opts, cap, &parse(data, opts, cap))
}

/// Checks that `items` are what the parser may make of `data` under these
/// limits; returns each item's line and whether it is a record.
pub fn check_items(
    data: &[u8],
    opts: &IngestOptions,
    cap: usize,
    items: &[Item],
) -> Vec<(u64, bool)> {
    if let Some(what) = binary_format(text(data)) {
        assert_eq!(items.len(), 1, "a {what} is one reject");
        let Item::Reject(r) = &items[0] else {
            panic!("a {what} yielded a record");
        };
        assert_eq!(r.line, 0, "a whole-file reject is at line 0");
        assert!(r.error.starts_with("not JSONL: "), "{}", r.error);
        assert_eq!(r.source, SOURCE);
        return vec![(0, false)];
    }

    let lines = lines(data);
    let expected: Vec<&Line<'_>> = lines
        .iter()
        .filter(|l| l.bytes.len() > cap || !l.bytes.iter().all(u8::is_ascii_whitespace))
        .collect();
    assert_eq!(
        items.len(),
        expected.len(),
        "every line that is not blank yields exactly one record or reject"
    );

    let mut out = Vec::with_capacity(items.len());
    for (item, line) in items.iter().zip(&expected) {
        match item {
            Item::Reject(r) => {
                assert_eq!(r.line, line.number, "rejects come in line order");
                assert!(r.line >= 1, "a line reject has a 1-based line");
                assert_eq!(r.source, SOURCE);
                assert!(!r.error.trim().is_empty(), "a reject says what is wrong");
                if let Some(f) = &r.field {
                    // A record field, or (invalid UTF-8) the key of the
                    // line whose value holds the bad bytes.
                    let is_key = || {
                        serde_json::from_str::<serde_json::Map<String, Value>>(
                            &String::from_utf8_lossy(line.bytes),
                        )
                        .is_ok_and(|m| m.contains_key(f))
                    };
                    assert!(
                        RECORD_FIELDS.contains(&f.as_str())
                            || (r.error.starts_with("invalid UTF-8") && is_key()),
                        "field {f:?} is neither a record field nor a key of the line"
                    );
                }
                if let Some(id) = &r.record_id {
                    assert!(!id.is_empty(), "a sniffed record id is never empty");
                }
                if line.bytes.len() > cap {
                    let head = format!("line is too long: {} bytes,", line.bytes.len());
                    assert!(r.error.starts_with(&head), "{} vs {head}", r.error);
                }
                out.push((r.line, false));
            }
            Item::Record(rec) => {
                assert_eq!(rec.origin.line, line.number, "records come in line order");
                assert_eq!(rec.origin.source, SOURCE);
                assert!(
                    line.bytes.len() <= cap,
                    "an over-long line is never a record"
                );
                // The record is what the line says, field for field.
                let obj: serde_json::Map<String, Value> =
                    serde_json::from_slice(line.bytes).expect("a record's line is a JSON object");
                let field = |k: &str| obj.get(k).and_then(Value::as_str);
                for (k, v) in [
                    ("id", rec.id.as_str()),
                    ("persona_id", rec.persona_id.as_str()),
                    ("kind", rec.kind.as_str()),
                    ("source_path", rec.source_path.as_str()),
                    ("created_at", rec.created_at.as_str()),
                    ("text", rec.text.as_str()),
                ] {
                    assert!(!v.trim().is_empty(), "record field {k} is empty");
                    assert_eq!(field(k), Some(v), "record field {k} differs from the line");
                }
                assert!(matches!(
                    rec.kind,
                    RecordKind::Journal | RecordKind::SessionSummary | RecordKind::PersonaMemory
                ));
                assert!(
                    chrono::DateTime::parse_from_rfc3339(&rec.created_at).is_ok(),
                    "created_at {:?} is RFC3339",
                    rec.created_at
                );
                assert!(
                    rec.text.len() as u64 <= opts.max_text_bytes,
                    "text over the limit got through"
                );
                assert_eq!(rec.user_id.as_deref(), field("user_id"));
                let mut seen = Vec::new();
                for f in &rec.flags {
                    assert!(FLAGS.contains(&f.as_str()), "unknown flag {f}");
                    assert!(!seen.contains(f), "flag {f} twice");
                    seen.push(f.clone());
                }
                assert_eq!(rec.fingerprint(), rec.clone().fingerprint());
                // Sentence spans (the quotes' anchors) lie inside the text,
                // on character boundaries, in order, trimmed and non-empty.
                let mut end = 0;
                for (s, e) in tomlite::segment::sentences(&rec.text) {
                    assert!(end <= s && s < e && e <= rec.text.len(), "span {s}..{e}");
                    assert!(rec.text.is_char_boundary(s) && rec.text.is_char_boundary(e));
                    let span = &rec.text[s..e];
                    assert_eq!(span, span.trim(), "span {s}..{e} is not trimmed");
                    end = e;
                }
                out.push((rec.origin.line, true));
            }
        }
    }
    out
}
