//! A curator's quote on a decisions line: `quote_start`/`quote_end`, UTF-8
//! byte offsets into the record's text, checked to be a real span of it.

use serde_json::Value;

/// A curator's quote: its offsets and the record's text between them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DecidedQuote {
    /// First byte.
    pub(super) start: u64,
    /// End byte (exclusive).
    pub(super) end: u64,
    /// The record's text between them.
    pub(super) text: String,
}

/// Why a quote is refused: the field at fault and the message.
pub(super) type QuoteFault = (&'static str, String);

/// One offset's cell: absent (missing or null), or a non-negative integer.
fn offset(name: &'static str, value: Option<&Value>) -> Result<Option<u64>, QuoteFault> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => Err((
            name,
            format!(
                "{name}: expected a non-negative integer (a UTF-8 byte offset into the record's text), got {other}"
            ),
        )),
    }
}

/// The curator's quote of a decisions line, given its `quote_start` and
/// `quote_end` cells and the record's text: both or neither, integers,
/// `start < end <= len`, each on a character boundary, and the span not
/// blank (a quote is evidence: it must hold words of the record).
pub(super) fn decided_quote(
    start: Option<&Value>,
    end: Option<&Value>,
    record_text: &str,
) -> Result<Option<DecidedQuote>, QuoteFault> {
    let start = offset("quote_start", start)?;
    let end = offset("quote_end", end)?;
    let (start, end) = match (start, end) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err((
                "quote_end",
                "missing: a quote needs both quote_start and quote_end".into(),
            ));
        }
        (None, Some(_)) => {
            return Err((
                "quote_start",
                "missing: a quote needs both quote_start and quote_end".into(),
            ));
        }
        (Some(s), Some(e)) => (s, e),
    };
    let len = record_text.len() as u64;
    if start >= len {
        return Err((
            "quote_start",
            format!("{start} is past the record's text ({len} bytes)"),
        ));
    }
    if end > len {
        return Err((
            "quote_end",
            format!("{end} is past the end of the record's text ({len} bytes)"),
        ));
    }
    if start >= end {
        return Err((
            "quote_end",
            format!("{end} is not after quote_start {start}: a quote is a non-empty span"),
        ));
    }
    for (name, at) in [("quote_start", start), ("quote_end", end)] {
        if !record_text.is_char_boundary(at as usize) {
            return Err((
                name,
                format!("{at} is inside a multi-byte UTF-8 character of the record's text"),
            ));
        }
    }
    let text = &record_text[start as usize..end as usize];
    if text.trim().is_empty() {
        return Err((
            "quote_start",
            format!("bytes [{start}, {end}) of the record's text are only whitespace: not a quote"),
        ));
    }
    Ok(Some(DecidedQuote {
        start,
        end,
        text: text.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TEXT: &str = "Je crois qu'Élodie sait."; // É is 2 bytes at 12..14

    fn q(s: Value, e: Value) -> Result<Option<DecidedQuote>, QuoteFault> {
        decided_quote(Some(&s), Some(&e), TEXT)
    }

    #[test]
    fn a_span_on_boundaries_is_its_bytes() {
        let got = q(json!(12), json!(19)).unwrap().unwrap();
        assert_eq!(got.text, "Élodie");
        assert_eq!((got.start, got.end), (12, 19));
        assert_eq!(decided_quote(None, None, TEXT), Ok(None));
        assert_eq!(q(Value::Null, Value::Null), Ok(None));
    }

    #[test]
    fn each_bad_offset_names_its_field() {
        let field = |s: Value, e: Value| q(s, e).unwrap_err().0;
        assert_eq!(
            decided_quote(Some(&json!(1)), None, TEXT).unwrap_err().0,
            "quote_end"
        );
        assert_eq!(
            decided_quote(None, Some(&json!(1)), TEXT).unwrap_err().0,
            "quote_start"
        );
        assert_eq!(field(json!(5), json!(5)), "quote_end");
        assert_eq!(field(json!(6), json!(5)), "quote_end");
        assert_eq!(field(json!(0), json!(999)), "quote_end");
        assert_eq!(field(json!(999), json!(1000)), "quote_start");
        assert_eq!(field(json!(13), json!(19)), "quote_start");
        assert_eq!(field(json!(0), json!(13)), "quote_end");
        assert_eq!(field(json!("3"), json!(5)), "quote_start");
        assert_eq!(field(json!(1), json!(5.5)), "quote_end");
        assert_eq!(field(json!(-1), json!(5)), "quote_start");
        assert_eq!(field(json!(2), json!(3)), "quote_start"); // " " only
    }
}
