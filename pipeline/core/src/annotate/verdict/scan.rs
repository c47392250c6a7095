//! Finding JSON objects in raw text: a byte scan for balanced braces
//! outside strings and code fences, bounded in depth.

use serde_json::{Map, Value};

/// Top-level keys that make a JSON object an annotation object.
pub const ANNOTATION_KEYS: [&str; 5] = ["tags", "affect", "intensity", "edges", "best_tom_kind"];

/// At most this many candidate objects are handed to the JSON parser per stage.
pub const MAX_CANDIDATES: usize = 256;

/// Whether `m` has at least one of [`ANNOTATION_KEYS`].
pub fn is_annotation_object(m: &Map<String, Value>) -> bool {
    ANNOTATION_KEYS.iter().any(|k| m.contains_key(*k))
}

/// A balanced `{…}` span of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    /// A key of [`ANNOTATION_KEYS`] sits directly in this object.
    pub(super) flagged: bool,
}

/// Open objects tracked at once; deeper (older) ones are forgotten, as the
/// JSON parser would refuse such nesting anyway.
pub(super) const MAX_OPEN: usize = 1024;

#[derive(Debug, Default)]
pub(super) struct Scan {
    /// Closed flagged spans, in the order they close.
    pub(super) spans: Vec<Span>,
    /// Starts of flagged objects that never close.
    pub(super) unclosed_flagged: Vec<usize>,
}

/// One pass over `text`: every balanced object, with string state tracked
/// inside objects (`quotes` are the string delimiters). Outside any object
/// quotes are prose and ignored; a line break ends a string.
pub(super) fn scan_objects(text: &[u8], quotes: &[u8]) -> Scan {
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
pub(super) fn next_is_colon(text: &[u8], i: usize) -> bool {
    text[i.min(text.len())..]
        .iter()
        .take(8)
        .find(|b| !matches!(b, b' ' | b'\t'))
        == Some(&b':')
}

/// Whether byte `at` lies inside a ``` fence (an odd number of fence lines before it).
pub(super) fn in_code_fence(text: &str, at: usize) -> bool {
    text[..at]
        .lines()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
        % 2
        == 1
}
