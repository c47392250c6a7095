//! JSONL records, streamed one capped line at a time.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::ingest::bytes::{UTF8_BOM, binary_format, read_line_capped};
use crate::ingest::record::{
    IngestError, IngestOptions, Item, Origin, Reject, json_type, record_from_map, sniff_record_id,
};

/// The longest JSONL line that is read: JSON escapes can make a text up to
/// six times longer on the line, plus room for the other fields. A longer
/// line is skipped (never held whole) and rejected with its length.
pub fn line_cap(opts: &IngestOptions) -> usize {
    (opts.max_text_bytes as usize).saturating_mul(6) + 64 * 1024
}

/// Streams JSONL records from any reader: the parser behind [`crate::ingest::open_input`] for a
/// JSONL file, as a function of the bytes alone (the fuzz target and the
/// corpus replay test drive it with an in-memory buffer). `path` names the
/// input in every item; lines longer than `line_cap` bytes are rejected.
///
/// Each line that is not blank yields exactly one item, a [`crate::ingest::record::Record`] or a
/// [`Reject`], in order; blank lines yield nothing. A UTF-8 byte order mark
/// at the start is not part of the first line. An input that starts like
/// UTF-16 text, a compressed file, a zip archive or a Parquet file yields a
/// single reject at line 0 instead, naming the format.
///
/// ```
/// use tomlite_core::ingest::jsonl::{jsonl_items, line_cap};
/// use tomlite_core::ingest::record::{IngestOptions, Item};
/// let opts = IngestOptions::default();
/// let input = &b"{\"id\": 1}\n\nnot json\n"[..];
/// let items: Vec<Item> = jsonl_items(input, "in.jsonl".as_ref(), &opts, line_cap(&opts))
///     .collect::<Result<_, _>>()
///     .unwrap();
/// let lines: Vec<u64> = items
///     .iter()
///     .map(|i| match i {
///         Item::Reject(r) => r.line,
///         Item::Record(r) => r.origin.line,
///     })
///     .collect();
/// assert_eq!(lines, [1, 3]);
/// ```
pub fn jsonl_items<R: BufRead>(
    reader: R,
    path: &Path,
    opts: &IngestOptions,
    line_cap: usize,
) -> impl Iterator<Item = Result<Item, IngestError>> + use<R> {
    JsonlRecords {
        reader,
        path: path.to_path_buf(),
        source: path.display().to_string(),
        line: 0,
        buf: Vec::new(),
        opts: opts.clone(),
        cap: line_cap,
        done: false,
        sniffed: false,
    }
}

struct JsonlRecords<R> {
    reader: R,
    path: PathBuf,
    source: String,
    line: u64,
    buf: Vec<u8>,
    opts: IngestOptions,
    cap: usize,
    done: bool,
    /// Whether the first bytes were checked for a binary format.
    sniffed: bool,
}

impl<R: BufRead> Iterator for JsonlRecords<R> {
    type Item = Result<Item, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.sniffed {
            self.sniffed = true;
            if let Some(not_jsonl) = self.sniff_binary_format() {
                self.done = true;
                return Some(not_jsonl);
            }
        }
        while !self.done {
            match read_line_capped(&mut self.reader, &mut self.buf, self.cap) {
                Ok(None) => self.done = true,
                Ok(Some(read)) => {
                    self.line += 1;
                    if read.over {
                        return Some(Ok(self.line_too_long(read.len)));
                    }
                    if !self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Some(Ok(self.line_item()));
                    }
                }
                Err(source) => {
                    self.done = true;
                    return Some(Err(self.io_error(source)));
                }
            }
        }
        None
    }
}

impl<R: BufRead> JsonlRecords<R> {
    /// Skips a UTF-8 byte order mark; an input that starts like a binary
    /// format yields a single reject at line 0, an unreadable one an error.
    fn sniff_binary_format(&mut self) -> Option<Result<Item, IngestError>> {
        let head = match self.reader.fill_buf() {
            Ok(head) if head.starts_with(UTF8_BOM) => {
                self.reader.consume(UTF8_BOM.len());
                self.reader.fill_buf()
            }
            other => other,
        };
        match head {
            Ok(head) => {
                let what = binary_format(head)?;
                Some(Ok(Item::Reject(Reject {
                    source: self.source.clone(),
                    line: 0,
                    record_id: None,
                    field: None,
                    error: format!("not JSONL: {what}; the file is not read"),
                })))
            }
            Err(source) => Some(Err(IngestError::Io {
                path: self.path.clone(),
                source,
            })),
        }
    }
}

impl<R> JsonlRecords<R> {
    /// A read error of the input.
    fn io_error(&self, source: std::io::Error) -> IngestError {
        IngestError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// A reject of the current line.
    fn reject(&self, record_id: Option<String>, field: Option<&str>, error: String) -> Item {
        Item::Reject(Reject {
            source: self.source.clone(),
            line: self.line,
            record_id,
            field: field.map(str::to_string),
            error,
        })
    }

    /// The current line was `len` bytes, over the cap (only its start is in
    /// the buffer).
    fn line_too_long(&self, len: u64) -> Item {
        self.reject(
            sniff_record_id(&self.buf, "id"),
            Some("text"),
            format!(
                "line is too long: {len} bytes, over the line limit of {} bytes \
                 (text limit {} bytes); skipped, not loaded",
                self.cap, self.opts.max_text_bytes
            ),
        )
    }

    /// The current (not blank) line as a record or a reject.
    fn line_item(&self) -> Item {
        let line = match std::str::from_utf8(&self.buf) {
            Ok(line) => line,
            Err(error) => return self.invalid_utf8(error),
        };
        let obj: Map<String, Value> = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(obj)) => obj,
            Ok(other) => {
                return self.reject(
                    None,
                    None,
                    format!("expected a JSON object, found {}", json_type(&other)),
                );
            }
            Err(error) => {
                return self.reject(
                    sniff_record_id(line.as_bytes(), "id"),
                    None,
                    format!("malformed JSON: {error}"),
                );
            }
        };
        let origin = Origin {
            source: self.source.clone(),
            line: self.line,
        };
        match record_from_map(&obj, origin, &self.opts) {
            Ok(record) => Item::Record(Box::new(record)),
            Err(reject) => Item::Reject(reject),
        }
    }

    /// The current line is not UTF-8: the reject names the record and the
    /// field holding the bad bytes when the line parses once they are replaced.
    fn invalid_utf8(&self, error: std::str::Utf8Error) -> Item {
        let lossy = String::from_utf8_lossy(&self.buf);
        let parsed: Option<Map<String, Value>> = serde_json::from_str(&lossy).ok();
        let record_id = parsed
            .as_ref()
            .and_then(|obj| obj.get("id"))
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .map(str::to_string);
        let field = parsed.as_ref().and_then(|obj| {
            obj.iter()
                .find(|(_, value)| value.as_str().is_some_and(|text| text.contains('\u{fffd}')))
                .map(|(name, _)| name.clone())
        });
        self.reject(
            record_id,
            field.as_deref(),
            format!("invalid UTF-8 at byte {} of the line", error.valid_up_to()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::bytes::*;
    use std::io::{BufReader, Read};
    use std::sync::{Arc, Mutex};

    #[test]
    fn capped_reader_skips_the_rest_of_an_over_long_line() {
        let mut r = BufReader::with_capacity(4, &b"abcdefgh\nok\r\n"[..]);
        let mut buf = Vec::new();
        let l = |over, consumed, len| {
            Some(LineRead {
                over,
                consumed,
                len,
            })
        };
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            l(true, 9, 8)
        );
        assert_eq!(buf, b"abcde");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            l(false, 4, 3)
        );
        assert_eq!(buf, b"ok");
        assert_eq!(read_line_capped(&mut r, &mut buf, 5).unwrap(), None);
    }

    /// `n` bytes of `z`, made on the fly: a line never held whole by the test either.
    struct Zs(usize);

    impl Read for Zs {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.0);
            out[..n].fill(b'z');
            self.0 -= n;
            Ok(n)
        }
    }

    #[test]
    fn a_50_mb_line_is_rejected_with_its_length_and_never_held_whole() {
        let huge = 50 * 1024 * 1024;
        let head = &br#"{"id": "b-huge", "text": ""#[..];
        let good = br#"
{"id": "g-1", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": "ok"}
"#;
        let input = head.chain(Zs(huge)).chain(&good[..]);
        let opts = IngestOptions::default();
        let cap = line_cap(&opts);
        let mut it = JsonlRecords {
            reader: BufReader::with_capacity(1 << 16, input),
            path: "big.jsonl".into(),
            source: "big.jsonl".into(),
            line: 0,
            buf: Vec::new(),
            opts: opts.clone(),
            cap,
            done: false,
            sniffed: false,
        };
        let Some(Ok(Item::Reject(r))) = it.next() else {
            panic!("the long line is a reject")
        };
        assert!(
            it.buf.capacity() <= 2 * cap,
            "the line buffer grew to {} bytes",
            it.buf.capacity()
        );
        assert_eq!((r.line, r.record_id.as_deref()), (1, Some("b-huge")));
        let len = head.len() + huge;
        assert!(
            r.error.starts_with(&format!(
                "line is too long: {len} bytes, over the line limit of {cap} bytes"
            )),
            "{}",
            r.error
        );
        let Some(Ok(Item::Record(g))) = it.next() else {
            panic!("the next line is read whole")
        };
        assert_eq!((g.id.as_str(), g.origin.line), ("g-1", 2));
        assert!(it.next().is_none());
    }

    #[test]
    fn a_compressed_file_given_as_jsonl_is_one_reject_for_the_file() {
        let opts = IngestOptions::default();
        let items: Vec<Item> = jsonl_items(
            &b"\x1f\x8b\x08\x00\n{}\n"[..],
            Path::new("x.jsonl"),
            &opts,
            line_cap(&opts),
        )
        .collect::<Result<_, _>>()
        .unwrap();
        let [Item::Reject(r)] = &items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(r.line, 0);
        assert_eq!(
            r.error,
            "not JSONL: a gzip-compressed file; decompress it first; the file is not read"
        );
        // Text that merely starts with a letter of a magic number is read line by line.
        assert_eq!(binary_format(b"PAR"), None);
        assert_eq!(binary_format(b"{\"id\""), None);
    }

    /// Regression (found by the fuzzer): a line with invalid UTF-8 and
    /// `"id": ""` was rejected with an empty record id instead of none.
    #[test]
    fn an_empty_id_on_an_invalid_utf8_line_is_no_id() {
        let opts = IngestOptions::default();
        let line = b"{\"id\": \"\", \"text\": \"caf\xff\"}\n";
        let items: Vec<Item> = jsonl_items(&line[..], Path::new("x.jsonl"), &opts, line_cap(&opts))
            .collect::<Result<_, _>>()
            .unwrap();
        let [Item::Reject(r)] = &items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(r.error, "invalid UTF-8 at byte 23 of the line");
        assert_eq!(
            (r.record_id.as_deref(), r.field.as_deref()),
            (None, Some("text"))
        );
    }

    /// A reader that hands out one byte per call, as a slow pipe may.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let Some((&b, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            out[0] = b;
            self.0 = rest;
            Ok(1)
        }
    }

    // Regression: a UTF-8 byte order mark made the first record a reject;
    // a UTF-16 file was one opaque reject per line.
    #[test]
    fn a_utf8_bom_is_skipped_and_utf16_is_one_reject_even_through_a_trickling_pipe() {
        let opts = IngestOptions::default();
        let line = br#"{"id": "b-1", "persona_id": "ada", "kind": "journal", "source_path": "x", "created_at": "2026-11-28T21:00:00Z", "text": "ok"}"#;
        let parse = |data: Vec<u8>| -> (Vec<Item>, String) {
            let tally = Arc::new(Mutex::new(Tally::default()));
            let reader = BufReader::new(HashingRead::new(Trickle(&data), tally.clone()));
            let items = jsonl_items(reader, Path::new("x.jsonl"), &opts, line_cap(&opts))
                .collect::<Result<_, _>>()
                .unwrap();
            let sha = tally.lock().unwrap().hex();
            (items, sha)
        };
        let data = [UTF8_BOM, &line[..], b"\n"].concat();
        let (items, sha) = parse(data.clone());
        let [Item::Record(r)] = &items[..] else {
            panic!("{items:?}")
        };
        assert_eq!((r.id.as_str(), r.origin.line), ("b-1", 1));
        assert_eq!(
            sha,
            crate::hash::sha256_bytes(&data),
            "every byte read is hashed"
        );
        for (bom, what) in [(&b"\xff\xfe"[..], UTF16_LE), (b"\xfe\xff", UTF16_BE)] {
            let (items, _) = parse([bom, b"{\0\"\0i\0d\0\n\0{\0\n\0"].concat());
            let [Item::Reject(r)] = &items[..] else {
                panic!("{items:?}")
            };
            assert_eq!(r.line, 0);
            assert_eq!(r.error, format!("not JSONL: {what}; the file is not read"));
            assert!(r.error.contains("UTF-16; convert to UTF-8"));
        }
    }
}
