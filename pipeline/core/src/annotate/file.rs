//! The file annotator: annotations made elsewhere (JSONL, one object per
//! `record_id`, or raw outputs parsed by [`crate::annotate::verdict`]),
//! indexed once and read back by position.

use foldhash::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::{FileExt, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tomlite_staging::Digest;

use crate::annotate::read_as::{EscapeShape, ParseClass};
use crate::annotate::{AnnotateError, Annotated, Annotator, AnnotatorInfo, parse_line};
use crate::ingest::bytes::{HashingRead, Stamp, Tally, read_line_capped};
use crate::ingest::record::{Record, Reject, json_type, sniff_record_id, truncate};

#[derive(Debug, Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
    line: u64,
    used: bool,
    /// The line is longer than the cap: only its first `len` bytes are read.
    over: bool,
    /// The line is well-formed JSON with a string `record_id` (a line whose
    /// id was only sniffed from broken JSON gives way to a well-formed one).
    sound: bool,
    /// Digest of the `len` bytes indexed: what is read back for the record
    /// must be the same bytes.
    digest: u64,
}

/// Digest of an indexed line's bytes (within one process).
fn line_digest(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher as _;
    foldhash::quality::FixedState::with_seed(0x0074_6f6d_6c69_7465).hash_one(bytes)
}

/// What the lines of a [`FileAnnotator`] hold.
#[derive(Debug)]
enum Lines {
    /// Annotation objects (`--annotations`).
    Annotations,
    /// `{record_id, annotator, raw}` envelopes of raw output (`--raw-annotations`).
    Raw(RawStats),
}

/// What the verdict parser made of the raw lines of one run.
#[derive(Debug, Default, Clone)]
struct RawStats {
    classes: std::collections::BTreeMap<&'static str, u64>,
    shapes: std::collections::BTreeMap<&'static str, u64>,
    invalid_lines: u64,
    record_id_mismatches: u64,
    quotes_anchored: u64,
}

impl RawStats {
    fn new() -> Self {
        Self {
            classes: ParseClass::ALL.iter().map(|c| (c.as_str(), 0)).collect(),
            shapes: EscapeShape::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            ..Default::default()
        }
    }

    fn to_json(&self, lines: usize) -> Value {
        serde_json::json!({
            "lines": lines,
            "parse_classes": self.classes,
            "escape_shapes": self.shapes,
            "invalid_lines": self.invalid_lines,
            "record_id_mismatches": self.record_id_mismatches,
            "quotes_anchored": self.quotes_anchored,
        })
    }
}

/// A line read back for a record.
#[derive(Debug, Clone)]
struct LineOf {
    text: String,
    line: u64,
    over: bool,
}

/// Annotations from a JSONL file (`--annotations`), one object per record
/// keyed by `record_id`; or, opened with [`FileAnnotator::open_raw`], raw
/// annotator output (`--raw-annotations`) read by the [verdict
/// parser](crate::annotate::verdict).
///
/// The file is indexed once (record id → byte offset, a few dozen bytes a
/// record) and each record's line is read when the record comes, so memory
/// does not hold the annotations themselves.
#[derive(Debug)]
pub struct FileAnnotator {
    path: PathBuf,
    file: File,
    /// The file as it was indexed.
    stamp: Stamp,
    sha256: String,
    index: HashMap<Box<str>, Slot>,
    problems: Vec<Reject>,
    cache: Option<(String, LineOf)>,
    lines: Lines,
}

/// Longest annotation line kept (longer lines are reported, not read).
const MAX_LINE: usize = 4 << 20;

/// Longest raw-annotation line read whole; of a longer one the first
/// [`RAW_PREFIX_KEPT`] bytes are kept and its record is quarantined.
pub const MAX_RAW_LINE: usize = 16 << 20;

/// Bytes kept of a raw-annotation line longer than [`MAX_RAW_LINE`].
pub const RAW_PREFIX_KEPT: usize = 64 << 10;

/// Opens `path` for reading, refusing anything but a regular file, and
/// stamps it as it is before it is read.
fn open_regular(path: &Path) -> Result<(File, Stamp), AnnotateError> {
    let io = |source| AnnotateError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Not blocking on a FIFO: it is refused below, unread.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(AnnotateError::NotAFile {
            path: path.to_path_buf(),
            kind: crate::ingest::bytes::file_kind(&metadata.file_type()),
        });
    }
    Ok((file, Stamp::of(&metadata)))
}

/// The `record_id` of an annotation line, read without the rest of it.
#[derive(serde::Deserialize)]
struct RecordIdOnly<'a> {
    #[serde(borrow)]
    record_id: std::borrow::Cow<'a, str>,
}

/// The record id of one line and whether the line is well-formed JSON (the
/// id of a broken or over-long line is sniffed).
fn line_record_id(buf: &[u8], over: bool) -> (Option<String>, bool) {
    let parsed = if over {
        None
    } else {
        Some(serde_json::from_slice::<RecordIdOnly>(buf))
    };
    match parsed {
        Some(Ok(key)) => (Some(key.record_id.into_owned()), true),
        _ => (sniff_record_id(buf, "record_id"), false),
    }
}

/// The problem of a broken line giving way to a well-formed one.
fn malformed_line(broken_line: u64, kept_line: u64) -> String {
    format!(
        "annotation line {broken_line} is not well-formed JSON; line {kept_line}, well-formed, is used for this record"
    )
}

/// The index of an annotation file while it is read once: record id →
/// line, and the problems found on the way.
struct Indexer {
    source: String,
    /// Longest line read whole.
    cap: usize,
    raw_mode: bool,
    index: HashMap<Box<str>, Slot>,
    problems: Vec<Reject>,
}

impl Indexer {
    fn new(path: &Path, raw_mode: bool) -> Self {
        Self {
            source: path.display().to_string(),
            cap: if raw_mode { MAX_RAW_LINE } else { MAX_LINE },
            raw_mode,
            index: HashMap::default(),
            problems: Vec::new(),
        }
    }

    /// Reads every line of `reader` into the index (a UTF-16 file is read
    /// to the end, for its hash, and indexes nothing).
    fn read_all(&mut self, reader: &mut impl std::io::BufRead) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let (mut offset, mut line) = (0u64, 0u64);
        loop {
            let mut start = offset;
            let Some(read) = read_line_capped(reader, &mut buf, self.cap)? else {
                return Ok(());
            };
            line += 1;
            offset += read.consumed;
            if line == 1 {
                if let Some(what) = crate::ingest::bytes::utf16(&buf) {
                    self.problems.push(Reject {
                        source: self.source.clone(),
                        line: 0,
                        record_id: None,
                        field: None,
                        error: format!("{what}; the file is not read"),
                    });
                    // Hashed to the end all the same.
                    while read_line_capped(reader, &mut buf, self.cap)?.is_some() {}
                    return Ok(());
                }
                if crate::ingest::bytes::strip_utf8_bom(&mut buf) {
                    start += crate::ingest::bytes::UTF8_BOM.len() as u64;
                }
            }
            if !read.over && buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.add_line(&buf, start, line, read.over);
        }
    }

    /// A `record_id` problem on `line`.
    fn problem(&mut self, line: u64, record_id: Option<String>, error: String) {
        self.problems.push(Reject {
            source: self.source.clone(),
            line,
            record_id,
            field: Some("record_id".to_string()),
            error,
        });
    }

    /// Indexes one non-blank line that starts at byte `start`.
    fn add_line(&mut self, buf: &[u8], start: u64, line: u64, over: bool) {
        if over && !self.raw_mode {
            self.problem(
                line,
                sniff_record_id(buf, "record_id"),
                format!("annotation line longer than {MAX_LINE} bytes"),
            );
            return;
        }
        let (record_id, sound) = line_record_id(buf, over);
        let Some(record_id) = record_id.filter(|id| !id.is_empty()) else {
            let error = if over {
                format!(
                    "annotation line longer than {} bytes with no record_id in them",
                    self.cap
                )
            } else {
                "annotation line has no readable record_id".into()
            };
            self.problem(line, None, error);
            return;
        };
        let len = if over {
            RAW_PREFIX_KEPT.min(buf.len())
        } else {
            buf.len()
        };
        let slot = Slot {
            offset: start,
            len: len as u32,
            line,
            used: false,
            over,
            sound,
            digest: line_digest(&buf[..len]),
        };
        self.insert(record_id, slot);
    }

    /// Keeps `slot` for `record_id` unless a sound line already holds it and
    /// this one is broken; a line that gives way is reported.
    fn insert(&mut self, record_id: String, slot: Slot) {
        let Some(prev) = self.index.get(record_id.as_str()) else {
            self.index.insert(record_id.into(), slot);
            return;
        };
        let (prev_line, prev_sound) = (prev.line, prev.sound);
        // A broken line does not take a record's place from a sound one.
        if prev_sound && !slot.sound {
            self.problem(
                slot.line,
                Some(record_id),
                malformed_line(slot.line, prev_line),
            );
            return;
        }
        let error = if slot.sound && !prev_sound {
            malformed_line(prev_line, slot.line)
        } else {
            format!(
                "duplicate annotation for this record; line {} is used instead of line {prev_line}",
                slot.line
            )
        };
        // Reported at the line that gives way.
        self.problem(prev_line, Some(record_id.clone()), error);
        self.index.insert(record_id.into(), slot);
    }
}

impl FileAnnotator {
    /// Indexes the file, reading it once: its sha256 is of the bytes
    /// indexed, each line read back later is checked to be the same bytes,
    /// and [`Annotator::check_unchanged`] fails when the file was written to
    /// since. Lines with no readable `record_id` and earlier duplicates are
    /// reported through [`Annotator::input_problems`]; a line that is not
    /// well-formed JSON (its `record_id` sniffed) gives way to a well-formed
    /// line of the same record, before or after it, and is reported. A
    /// UTF-8 byte order mark is skipped; a UTF-16 file is one problem at
    /// line 0 and no annotation.
    pub fn open(path: &Path) -> Result<Self, AnnotateError> {
        Self::open_as(path, Lines::Annotations)
    }

    /// Indexes a file of raw annotator output: JSONL lines
    /// `{"record_id": "...", "annotator": "...", "raw": "<the output as returned>"}`.
    /// Each record's `raw` goes through [`crate::annotate::verdict::parse`]; an
    /// `ANOMALY` (or a line without a string `raw`) is quarantined with
    /// `unparseable_annotation` and its raw text kept.
    pub fn open_raw(path: &Path) -> Result<Self, AnnotateError> {
        Self::open_as(path, Lines::Raw(RawStats::new()))
    }

    fn open_as(path: &Path, lines: Lines) -> Result<Self, AnnotateError> {
        let raw_mode = matches!(lines, Lines::Raw(_));
        let io = |source| AnnotateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (file, before) = open_regular(path)?;
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut reader = BufReader::with_capacity(
            1 << 16,
            HashingRead::new(file.try_clone().map_err(io)?, tally.clone()),
        );
        let mut indexer = Indexer::new(path, raw_mode);
        indexer.read_all(&mut reader).map_err(io)?;
        drop(reader);
        let sha256 = tally.lock().unwrap_or_else(|p| p.into_inner()).hex();
        let this = Self {
            path: path.to_path_buf(),
            stamp: before,
            file,
            sha256,
            index: indexer.index,
            problems: indexer.problems,
            cache: None,
            lines,
        };
        // Written to while it was indexed: offsets may not match the file.
        this.check_unchanged()?;
        Ok(this)
    }

    fn unused_lines(&self) -> Vec<Reject> {
        let mut out: Vec<Reject> = self
            .index
            .iter()
            .filter(|(_, s)| !s.used)
            .map(|(id, s)| Reject {
                source: self.path.display().to_string(),
                line: s.line,
                record_id: Some(id.to_string()),
                field: Some("record_id".into()),
                error: "annotation for a record that is not in the input (or was rejected)".into(),
            })
            .collect();
        out.sort_by_key(|r| r.line);
        out
    }

    /// Number of annotation lines indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the file holds no annotation.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn line_for(&mut self, record_id: &str) -> Result<Option<LineOf>, AnnotateError> {
        if let Some((id, line)) = &self.cache
            && id == record_id
        {
            return Ok(Some(line.clone()));
        }
        let Some(slot) = self.index.get_mut(record_id) else {
            return Ok(None);
        };
        slot.used = true;
        let mut buf = vec![0u8; slot.len as usize];
        self.file
            .read_exact_at(&mut buf, slot.offset)
            .map_err(|source| AnnotateError::Io {
                path: self.path.clone(),
                source,
            })?;
        if line_digest(&buf) != slot.digest {
            let now = sniff_record_id(&buf, "record_id")
                .map(|id| format!("record `{id}`"))
                .unwrap_or_else(|| "no readable record_id".into());
            return Err(AnnotateError::Changed {
                path: self.path.clone(),
                what: format!(
                    "line {} no longer holds the annotation of record `{record_id}` that was indexed there; it now reads {now}",
                    slot.line
                ),
            });
        }
        let line = LineOf {
            text: String::from_utf8_lossy(&buf).into_owned(),
            line: slot.line,
            over: slot.over,
        };
        self.cache = Some((record_id.to_string(), line.clone()));
        Ok(Some(line))
    }

    /// Reads one raw-annotation line for `record` through the verdict parser.
    fn parse_raw(&mut self, record: &Record, line: &LineOf) -> Annotated {
        let Lines::Raw(stats) = &mut self.lines else {
            return parse_line(&line.text);
        };
        let location = format!(
            "{} line {} (record {})",
            self.path.display(),
            line.line,
            record.id
        );
        let envelope = if line.over {
            Err(format!(
                "{location}: longer than {MAX_RAW_LINE} bytes; only its first {} bytes are kept as raw",
                line.text.len()
            ))
        } else {
            read_envelope(&line.text, &location)
        };
        match envelope {
            Ok((raw, annotator)) => stats.verdict_of(record, raw, annotator, &location),
            Err(error) => {
                stats.invalid_lines += 1;
                Annotated::Unparseable {
                    raw: line.text.clone(),
                    error,
                    read_as: None,
                }
            }
        }
    }
}

/// The `raw` text and the `annotator` of a raw-annotation envelope, or why
/// the line is invalid (`location` says where it is).
fn read_envelope(text: &str, location: &str) -> Result<(String, Option<String>), String> {
    let mut envelope = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => fields,
        Ok(other) => {
            return Err(format!(
                "{location}: expected a JSON object, found {}",
                json_type(&other)
            ));
        }
        Err(e) => return Err(format!("{location}: malformed JSON: {e}")),
    };
    let raw = match envelope.remove("raw") {
        Some(Value::String(raw)) => raw,
        None => return Err(format!("{location}: field `raw`: missing")),
        Some(other) => {
            return Err(format!(
                "{location}: field `raw`: expected a string, found {}",
                json_type(&other)
            ));
        }
    };
    let annotator = match envelope.remove("annotator") {
        None | Some(Value::Null) => None,
        Some(Value::String(annotator)) => Some(annotator),
        Some(other) => {
            return Err(format!(
                "{location}: field `annotator`: expected a string, found {}",
                json_type(&other)
            ));
        }
    };
    Ok((raw, annotator))
}

impl RawStats {
    /// What the verdict parser makes of `raw` for `record`, counted; the
    /// envelope's `annotator` fills in an annotation that names none.
    fn verdict_of(
        &mut self,
        record: &Record,
        raw: String,
        annotator: Option<String>,
        location: &str,
    ) -> Annotated {
        let verdict = crate::annotate::verdict::parse(&raw);
        let read_as = verdict.read_as();
        *self.classes.entry(verdict.class.as_str()).or_default() += 1;
        if let Some(shape) = verdict.shape {
            *self.shapes.entry(shape.as_str()).or_default() += 1;
        }
        let Some(mut annotation) = verdict.annotation else {
            return Annotated::Unparseable {
                raw,
                error: format!("{location}: ANOMALY: {}", verdict.error.unwrap_or_default()),
                read_as: Some(read_as),
            };
        };
        if let Some(Value::String(named)) = verdict.object.as_ref().and_then(|o| o.get("record_id"))
            && *named != record.id
        {
            self.record_id_mismatches += 1;
            return Annotated::Unparseable {
                error: format!(
                    "{location}: field `record_id`: the {} annotation names record `{named}`",
                    verdict.class.as_str()
                ),
                raw,
                read_as: Some(read_as),
            };
        }
        if annotation.annotator.is_none() {
            annotation.annotator = annotator;
        }
        annotation.read_as = Some(read_as);
        self.quotes_anchored +=
            crate::annotate::verdict::anchor_quotes(&mut annotation, &record.text) as u64;
        Annotated::Parsed(annotation)
    }
}

impl Annotator for FileAnnotator {
    fn info(&self) -> AnnotatorInfo {
        let kind = match self.lines {
            Lines::Annotations => "file",
            Lines::Raw(_) => "raw",
        };
        AnnotatorInfo {
            id: format!("{kind}:{}", self.path.display()),
            sha256: self.sha256.clone(),
        }
    }

    fn annotation_digest(&mut self, record: &Record) -> Result<Digest, AnnotateError> {
        let line = self.line_for(&record.id)?;
        let mut h = Sha256::new();
        if let Lines::Raw(_) = self.lines {
            // What the parser makes of a line is part of the annotation.
            h.update(b"raw-verdict-v1\0");
        }
        match line {
            Some(l) => {
                h.update(b"line\0");
                h.update(l.text.as_bytes());
            }
            None => h.update(b"missing\0"),
        }
        Ok(truncate(h.finalize().as_slice()))
    }

    fn annotate(&mut self, records: &[&Record]) -> Result<Vec<Annotated>, AnnotateError> {
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(match self.line_for(&r.id)? {
                None => Annotated::Missing,
                Some(line) => match self.lines {
                    Lines::Annotations => parse_line(&line.text),
                    Lines::Raw(_) => self.parse_raw(r, &line),
                },
            });
        }
        Ok(out)
    }

    fn input_problems(&mut self) -> Vec<Reject> {
        std::mem::take(&mut self.problems)
    }

    fn check_unchanged(&self) -> Result<(), AnnotateError> {
        let now = self.file.metadata().map_err(|source| AnnotateError::Io {
            path: self.path.clone(),
            source,
        })?;
        match self.stamp.changed(&Stamp::of(&now)) {
            Some(what) => Err(AnnotateError::Changed {
                path: self.path.clone(),
                what,
            }),
            None => Ok(()),
        }
    }

    fn unused(&self) -> Vec<Reject> {
        self.unused_lines()
    }

    fn stats(&self) -> Value {
        match &self.lines {
            Lines::Annotations => Value::Null,
            Lines::Raw(s) => serde_json::json!({"raw_annotations": s.to_json(self.index.len())}),
        }
    }

    fn status_counts(&self) -> Option<Value> {
        match &self.lines {
            Lines::Annotations => None,
            Lines::Raw(s) => Some(s.to_json(self.index.len())),
        }
    }
}
