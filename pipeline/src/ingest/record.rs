//! Input records and their ingestion from JSONL, Parquet and folders of
//! `.md`/`.txt` journals.
//!
//! Every source is streamed: an iterator yields one [`Item`] at a time, a
//! valid [`Record`] or a [`Reject`] that names the source, the 1-based line
//! (or row), the record id when known, the field and the error.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tomlite_staging::Digest;

/// The three kinds of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A journal entry.
    Journal,
    /// A summary of a work or chat session.
    SessionSummary,
    /// A stored persona memory.
    PersonaMemory,
}

impl RecordKind {
    /// The kind as the input spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Journal => "journal",
            RecordKind::SessionSummary => "session_summary",
            RecordKind::PersonaMemory => "persona_memory",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "journal" => Some(Self::Journal),
            "session_summary" => Some(Self::SessionSummary),
            "persona_memory" => Some(Self::PersonaMemory),
            _ => None,
        }
    }
}

/// The record flags that make a record untouchable without a curator.
pub const FLAGS: [&str; 2] = ["sensitive", "safety"];

/// A valid input record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Unique, stable id.
    pub id: String,
    /// The persona the memory belongs to.
    pub persona_id: String,
    /// What kind of record it is.
    pub kind: RecordKind,
    /// The source anchor.
    pub source_path: String,
    /// RFC3339 timestamp, as given.
    pub created_at: String,
    /// The text; quotes are byte ranges of it.
    pub text: String,
    /// `sensitive` and/or `safety`.
    pub flags: Vec<String>,
    /// The user the record is about, if any.
    pub user_id: Option<String>,
    /// Where the record came from.
    pub origin: Origin,
}

/// A record's place in its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The input file.
    pub source: String,
    /// 1-based line (JSONL), row (Parquet) or 1 (a journal file).
    pub line: u64,
}

impl Record {
    /// Digest of everything that defines the record: content and metadata
    /// (not its position in the input).
    pub fn fingerprint(&self) -> Digest {
        let mut h = Sha256::new();
        let mut flags = self.flags.clone();
        flags.sort();
        for part in [
            self.id.as_str(),
            self.persona_id.as_str(),
            self.kind.as_str(),
            self.source_path.as_str(),
            self.created_at.as_str(),
            self.user_id.as_deref().unwrap_or("\u{0}"),
            &flags.join("\u{1e}"),
            self.text.as_str(),
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        truncate(h.finalize().as_slice())
    }

    /// Whether the record is flagged `sensitive` or `safety`.
    pub fn is_sensitive(&self) -> bool {
        !self.flags.is_empty()
    }
}

/// First 16 bytes of a sha256.
pub fn truncate(sha: &[u8]) -> Digest {
    let mut d = [0u8; 16];
    d.copy_from_slice(&sha[..16]);
    d
}

/// An input line, row or file that is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The input file.
    pub source: String,
    /// 1-based line or row; 0 when the whole file is rejected (a Parquet
    /// file that cannot be read or has the wrong schema, a compressed or
    /// binary file given as JSONL).
    pub line: u64,
    /// The record id, when it could be read.
    pub record_id: Option<String>,
    /// The offending field, when one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub error: String,
}

/// What an input yields.
#[derive(Debug)]
pub enum Item {
    /// A valid record.
    Record(Box<Record>),
    /// A line, row or file that is not one.
    Reject(Reject),
}

/// An input that cannot be read at all (as opposed to a bad line in it).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The file or folder cannot be read.
    #[error("cannot read input {}", path.display())]
    Io {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet file cannot be decoded.
    #[error("cannot read Parquet input {}", path.display())]
    Parquet {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A Parquet batch cannot be decoded.
    #[error("cannot decode Parquet input {}", path.display())]
    Arrow {
        /// The input.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// A journal file sits at the root of the folder and no persona was given.
    #[error("journal folder {}: {message}", path.display())]
    Journal {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The input is something that cannot be read as one (a device; a
    /// Parquet input that is a pipe).
    #[error("input {}: {message}", path.display())]
    NotAFile {
        /// The input.
        path: PathBuf,
        /// What it is and what to do.
        message: String,
    },
    /// The file changed while it was read: what was read may mix two
    /// versions of it, so nothing from it is committed.
    #[error(
        "input {} changed while it was read ({what}); run again once it is complete",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
}

/// How records are checked.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Longest accepted text, in bytes.
    pub max_text_bytes: u64,
    /// Persona of journal files that sit directly in the folder.
    pub journal_persona: Option<String>,
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            max_text_bytes: 32 * 1024,
            journal_persona: None,
        }
    }
}

/// The stream of one input.
pub type Items = Box<dyn Iterator<Item = Result<Item, IngestError>>>;

/// Opens an input by its shape: a folder of journals, a `.parquet` file, or JSONL.
pub fn open(path: &Path, opts: &IngestOptions) -> Result<Items, IngestError> {
    open_input(path, opts).map(|(items, _)| items)
}

/// Whether `path` can be an input at all, by what it is (links followed):
/// a folder, a regular file, or (JSONL only) a pipe, FIFO or socket, read
/// once as it streams. A device, or a Parquet input that cannot be seeked,
/// is refused with what to do instead.
pub fn check_input(path: &Path) -> Result<(), IngestError> {
    let meta = std::fs::metadata(path).map_err(|source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    check_kind(path, &meta)
}

fn check_kind(path: &Path, meta: &std::fs::Metadata) -> Result<(), IngestError> {
    let ft = meta.file_type();
    if ft.is_dir() || ft.is_file() {
        return Ok(());
    }
    let refuse = |message: String| {
        Err(IngestError::NotAFile {
            path: path.to_path_buf(),
            message,
        })
    };
    if ft.is_char_device() || ft.is_block_device() {
        return refuse(
            "a device, not a regular file, a folder or a pipe; give a file of records".into(),
        );
    }
    if is_parquet(path) {
        return refuse(format!(
            "{}; a Parquet input must be a regular file (it is read by seeking): write it to a file first",
            file_kind(&ft)
        ));
    }
    Ok(())
}

fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// What a file that is not a regular file is, for messages.
pub(crate) fn file_kind(ft: &std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a folder"
    } else {
        "a regular file"
    }
}

/// Opens an input like [`open`] and returns, with its items, the handle
/// that gives its sha256 once they are read ([`InputDigest::finish`]).
///
/// A file is read once: its bytes are hashed as the parser reads them, so a
/// pipe (`--input /dev/stdin`, `<(...)`) is read like a file and the sha256
/// describes exactly the bytes the records came from. A folder's sha256 is
/// over the journal files it reads (relative path and sha256 of each).
pub fn open_input(path: &Path, opts: &IngestOptions) -> Result<(Items, InputDigest), IngestError> {
    let io = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    check_input(path)?;
    if std::fs::metadata(path).map_err(io)?.is_dir() {
        let (items, tally) = crate::ingest::journals::open(path, opts)?;
        return Ok((
            items,
            InputDigest {
                path: path.to_path_buf(),
                kind: DigestKind::Dir(tally),
            },
        ));
    }
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    check_kind(path, &meta)?;
    let regular = meta.is_file();
    if is_parquet(path) {
        let (sha256, bytes) = sha256_of_file(&file).map_err(io)?;
        let items = crate::ingest::parquet::open_file(file.try_clone().map_err(io)?, path, opts)?;
        return Ok((
            items,
            InputDigest {
                path: path.to_path_buf(),
                kind: DigestKind::Whole {
                    sha256,
                    bytes,
                    file,
                    before: Stamp::of(&meta),
                },
            },
        ));
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let reader = HashingRead::new(file.try_clone().map_err(io)?, tally.clone());
    let items = Box::new(jsonl_items(
        BufReader::with_capacity(1 << 16, reader),
        path,
        opts,
        line_cap(opts),
    ));
    Ok((
        items,
        InputDigest {
            path: path.to_path_buf(),
            kind: DigestKind::Stream {
                tally,
                file: regular.then_some(file),
                before: Stamp::of(&meta),
            },
        },
    ))
}

/// What identifies a file's content without reading it: compared before
/// and after a read to tell that nothing wrote to it meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(crate) fn of(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// How `now` differs from this stamp, if it does.
    pub(crate) fn changed(&self, now: &Stamp) -> Option<String> {
        if now == self {
            return None;
        }
        Some(if now.len != self.len {
            format!(
                "{} bytes when it was opened, {} bytes now",
                self.len, now.len
            )
        } else {
            "written to since it was opened: its modification time changed".to_string()
        })
    }
}

/// Bytes hashed so far.
#[derive(Default)]
pub(crate) struct Tally {
    hasher: Sha256,
    bytes: u64,
}

impl Tally {
    pub(crate) fn update(&mut self, b: &[u8]) {
        self.hasher.update(b);
        self.bytes += b.len() as u64;
    }

    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

/// A reader that hashes every byte it hands out. Its first read returns at
/// least the 16 bytes a format is known by (unless the input is shorter),
/// even from a pipe that delivers them one at a time.
pub(crate) struct HashingRead<R> {
    inner: R,
    tally: Arc<Mutex<Tally>>,
    first: bool,
}

impl<R: Read> HashingRead<R> {
    pub(crate) fn new(inner: R, tally: Arc<Mutex<Tally>>) -> Self {
        Self {
            inner,
            tally,
            first: true,
        }
    }
}

impl<R: Read> Read for HashingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = self.inner.read(buf)?;
        if self.first {
            self.first = false;
            while n > 0 && n < buf.len().min(16) {
                match self.inner.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(m) => n += m,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.tally
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .update(&buf[..n]);
        Ok(n)
    }
}

/// sha256 and length of a whole file, read from its start through `file`
/// without moving its position.
fn sha256_of_file(file: &File) -> std::io::Result<(String, u64)> {
    use std::os::unix::fs::FileExt as _;
    let mut t = Tally::default();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match file.read_at(&mut buf, t.bytes) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok((t.hex(), t.bytes));
        }
        t.update(&buf[..n]);
    }
}

/// Opens a file inside a journal folder without following a link and
/// without blocking on a FIFO; anything but a regular file is refused
/// (`Ok(Err(kind))`) before a byte of it is read.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<Result<File, &'static str>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Err("a symbolic link")),
        Err(e) => return Err(e),
    };
    let ft = file.metadata()?.file_type();
    Ok(if ft.is_file() {
        Ok(file)
    } else {
        Err(file_kind(&ft))
    })
}

/// The sha256 of an input, of the bytes its records were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSha {
    /// sha256, hex.
    pub sha256: String,
    /// Bytes hashed (a folder: of its journal files).
    pub bytes: u64,
}

/// Gives an input's sha256 once its items are read; see [`open_input`].
pub struct InputDigest {
    path: PathBuf,
    kind: DigestKind,
}

enum DigestKind {
    /// JSONL, hashed as read; `file` (a regular file only) to hash what the
    /// parser left unread.
    Stream {
        tally: Arc<Mutex<Tally>>,
        file: Option<File>,
        before: Stamp,
    },
    /// Parquet, hashed whole when opened.
    Whole {
        sha256: String,
        bytes: u64,
        file: File,
        before: Stamp,
    },
    /// A journal folder.
    Dir(Arc<Mutex<crate::ingest::journals::DirTally>>),
}

impl InputDigest {
    /// The sha256 of the input, once its items are read (or the run
    /// stopped taking them): a regular file's or folder's unread rest is
    /// hashed too, so the sha256 is of the whole input; a pipe's is of the
    /// bytes read from it. Fails when a file changed while it was read.
    pub fn finish(self) -> Result<InputSha, IngestError> {
        let io = |source| IngestError::Io {
            path: self.path.clone(),
            source,
        };
        let changed = |before: &Stamp, file: &File| -> Result<(), IngestError> {
            let now = Stamp::of(&file.metadata().map_err(io)?);
            match before.changed(&now) {
                Some(what) => Err(IngestError::Changed {
                    path: self.path.clone(),
                    what,
                }),
                None => Ok(()),
            }
        };
        match self.kind {
            DigestKind::Stream {
                tally,
                file,
                before,
            } => {
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(mut f) = file {
                    // The parser's reader shares this file's position.
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        let n = match f.read(&mut buf) {
                            Ok(n) => n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                            Err(e) => return Err(io(e)),
                        };
                        if n == 0 {
                            break;
                        }
                        t.update(&buf[..n]);
                    }
                    changed(&before, &f)?;
                }
                Ok(InputSha {
                    sha256: t.hex(),
                    bytes: t.bytes,
                })
            }
            DigestKind::Whole {
                sha256,
                bytes,
                file,
                before,
            } => {
                changed(&before, &file)?;
                Ok(InputSha { sha256, bytes })
            }
            DigestKind::Dir(tally) => crate::ingest::journals::finish(&tally),
        }
    }
}

/// The longest JSONL line that is read: JSON escapes can make a text up to
/// six times longer on the line, plus room for the other fields. A longer
/// line is skipped (never held whole) and rejected with its length.
pub fn line_cap(opts: &IngestOptions) -> usize {
    (opts.max_text_bytes as usize).saturating_mul(6) + 64 * 1024
}

/// Streams JSONL records from any reader: the parser behind [`open`] for a
/// JSONL file, as a function of the bytes alone (the fuzz target and the
/// corpus replay test drive it with an in-memory buffer). `path` names the
/// input in every item; lines longer than `line_cap` bytes are rejected.
///
/// Each line that is not blank yields exactly one item, a [`Record`] or a
/// [`Reject`], in order; blank lines yield nothing. A UTF-8 byte order mark
/// at the start is not part of the first line. An input that starts like
/// UTF-16 text, a compressed file, a zip archive or a Parquet file yields a
/// single reject at line 0 instead, naming the format.
///
/// ```
/// use tomlite::ingest::record::{IngestOptions, Item, jsonl_items, line_cap};
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

/// What a UTF-16 file is told (little-endian byte order mark).
pub const UTF16_LE: &str =
    "UTF-16; convert to UTF-8 (the file starts with a little-endian UTF-16 byte order mark)";

/// What a UTF-16 file is told (big-endian byte order mark).
pub const UTF16_BE: &str =
    "UTF-16; convert to UTF-8 (the file starts with a big-endian UTF-16 byte order mark)";

/// The UTF-8 byte order mark, stripped from the start of a text input.
pub const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Drops a UTF-8 byte-order mark from the start of `buf`; says whether
/// there was one.
pub fn strip_utf8_bom(buf: &mut Vec<u8>) -> bool {
    let had = buf.starts_with(UTF8_BOM);
    if had {
        buf.drain(..UTF8_BOM.len());
    }
    had
}

/// [`UTF16_LE`] or [`UTF16_BE`] when the bytes start with a UTF-16 byte order mark.
pub fn utf16(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\xff\xfe") {
        Some(UTF16_LE)
    } else if head.starts_with(b"\xfe\xff") {
        Some(UTF16_BE)
    } else {
        None
    }
}

/// Formats that a JSONL input is sometimes given by mistake, known by their
/// first bytes; no line of such a file can be a record.
const MAGIC: [(&[u8], &str); 7] = [
    (b"\xff\xfe", UTF16_LE),
    (b"\xfe\xff", UTF16_BE),
    (b"\x1f\x8b", "a gzip-compressed file; decompress it first"),
    (
        b"\x28\xb5\x2f\xfd",
        "a zstd-compressed file; decompress it first",
    ),
    (
        b"\xfd7zXZ\x00",
        "an xz-compressed file; decompress it first",
    ),
    (b"PK\x03\x04", "a zip archive; extract it first"),
    (b"PAR1", "a Parquet file; give it a .parquet name"),
];

/// What a JSONL input is instead (`"a gzip-compressed file; …"`), if its
/// first bytes say so: UTF-16 text, gzip, zstd, xz, zip or Parquet. (A UTF-8
/// byte order mark is stripped before the check.)
pub fn binary_format(head: &[u8]) -> Option<&'static str> {
    MAGIC
        .iter()
        .find(|(m, _)| head.starts_with(m))
        .map(|(_, what)| *what)
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

/// One line read by [`read_line_capped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRead {
    /// The line was longer than the cap (the rest was skipped, not kept).
    pub over: bool,
    /// Bytes consumed from the input, newline included.
    pub consumed: u64,
    /// Length of the line in bytes, without its `\n` (counted, not kept,
    /// past the cap).
    pub len: u64,
}

/// Reads one line into `buf` (without its newline), keeping at most `cap`
/// bytes; returns `None` at end of input.
pub fn read_line_capped<R: BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<LineRead>> {
    buf.clear();
    let mut over = false;
    let mut consumed = 0u64;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok((consumed > 0).then_some(LineRead {
                over,
                consumed,
                len: consumed,
            }));
        }
        let (part, found) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !over {
            let room = cap.saturating_sub(buf.len());
            if part.len() > room {
                over = true;
                buf.extend_from_slice(&part[..room]);
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = found.unwrap_or(chunk.len());
        r.consume(used);
        consumed += used as u64;
        if found.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(LineRead {
                over,
                consumed,
                len: consumed - 1,
            }));
        }
    }
}

impl<R: BufRead> Iterator for JsonlRecords<R> {
    type Item = Result<Item, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        let cap = self.cap;
        if !self.sniffed {
            self.sniffed = true;
            let head = match self.reader.fill_buf() {
                Ok(head) if head.starts_with(UTF8_BOM) => {
                    self.reader.consume(UTF8_BOM.len());
                    self.reader.fill_buf()
                }
                other => other,
            };
            match head {
                Ok(head) => {
                    if let Some(what) = binary_format(head) {
                        self.done = true;
                        return Some(Ok(Item::Reject(Reject {
                            source: self.source.clone(),
                            line: 0,
                            record_id: None,
                            field: None,
                            error: format!("not JSONL: {what}; the file is not read"),
                        })));
                    }
                }
                Err(source) => {
                    self.done = true;
                    return Some(Err(IngestError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
        }
        loop {
            if self.done {
                return None;
            }
            let (over, len) = match read_line_capped(&mut self.reader, &mut self.buf, cap) {
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Ok(Some(l)) => (l.over, l.len),
                Err(source) => {
                    self.done = true;
                    return Some(Err(IngestError::Io {
                        path: self.path.clone(),
                        source,
                    }));
                }
            };
            self.line += 1;
            if !over && self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let reject = |record_id: Option<String>, field: Option<&str>, error: String| {
                Some(Ok(Item::Reject(Reject {
                    source: self.source.clone(),
                    line: self.line,
                    record_id,
                    field: field.map(str::to_string),
                    error,
                })))
            };
            if over {
                return reject(
                    sniff_record_id(&self.buf, "id"),
                    Some("text"),
                    format!(
                        "line is too long: {len} bytes, over the line limit of {cap} bytes \
                         (text limit {} bytes); skipped, not loaded",
                        self.opts.max_text_bytes
                    ),
                );
            }
            let line = match std::str::from_utf8(&self.buf) {
                Ok(s) => s,
                Err(e) => {
                    let lossy = String::from_utf8_lossy(&self.buf);
                    let parsed: Option<Map<String, Value>> = serde_json::from_str(&lossy).ok();
                    let id = parsed
                        .as_ref()
                        .and_then(|m| m.get("id"))
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string);
                    let field = parsed.as_ref().and_then(|m| {
                        m.iter()
                            .find(|(_, v)| v.as_str().is_some_and(|s| s.contains('\u{fffd}')))
                            .map(|(k, _)| k.clone())
                    });
                    return reject(
                        id,
                        field.as_deref(),
                        format!("invalid UTF-8 at byte {} of the line", e.valid_up_to()),
                    );
                }
            };
            let obj: Map<String, Value> = match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(m)) => m,
                Ok(other) => {
                    return reject(
                        None,
                        None,
                        format!("expected a JSON object, found {}", json_type(&other)),
                    );
                }
                Err(e) => {
                    return reject(
                        sniff_record_id(line.as_bytes(), "id"),
                        None,
                        format!("malformed JSON: {e}"),
                    );
                }
            };
            let origin = Origin {
                source: self.source.clone(),
                line: self.line,
            };
            return Some(Ok(match record_from_map(&obj, origin, &self.opts) {
                Ok(r) => Item::Record(Box::new(r)),
                Err(r) => Item::Reject(r),
            }));
        }
    }
}

/// The name of a JSON value's type, for messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Finds `"<key>": "<value>"` in a line that is not valid JSON, so that a
/// reject can still name its record.
pub fn sniff_record_id(line: &[u8], key: &str) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let needle = format!("\"{key}\"");
    let mut from = 0;
    while let Some(i) = text[from..].find(&needle) {
        let rest = text[from + i + needle.len()..].trim_start();
        if let Some(rest) = rest.strip_prefix(':') {
            let rest = rest.trim_start();
            if let Some(rest) = rest.strip_prefix('"') {
                let end = rest.find(['"', '\\'])?;
                if rest.as_bytes()[end] == b'"' && end > 0 {
                    return Some(rest[..end].to_string());
                }
                return None;
            }
        }
        from += i + needle.len();
    }
    None
}

/// Checks one record given as a JSON object (a JSONL line, a Parquet row or a
/// journal file), field by field; the first broken field is reported.
pub fn record_from_map(
    obj: &Map<String, Value>,
    origin: Origin,
    opts: &IngestOptions,
) -> Result<Record, Reject> {
    let id_value = obj
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let reject = |field: &str, error: String| Reject {
        source: origin.source.clone(),
        line: origin.line,
        record_id: id_value.map(str::to_string),
        field: Some(field.to_string()),
        error,
    };
    let required = |field: &str| -> Result<&str, Reject> {
        match obj.get(field) {
            None | Some(Value::Null) => Err(reject(field, "missing required field".into())),
            Some(Value::String(s)) if s.trim().is_empty() => {
                Err(reject(field, "must not be empty".into()))
            }
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(reject(
                field,
                format!("expected a string, found {}", json_type(other)),
            )),
        }
    };
    let id = required("id")?;
    let persona_id = required("persona_id")?;
    let kind_s = required("kind")?;
    let kind = RecordKind::parse(kind_s).ok_or_else(|| {
        reject(
            "kind",
            format!(
                "unknown kind `{kind_s}` (expected journal, session_summary or persona_memory)"
            ),
        )
    })?;
    let source_path = required("source_path")?;
    let created_at = required("created_at")?;
    DateTime::parse_from_rfc3339(created_at).map_err(|e| {
        reject(
            "created_at",
            format!("`{created_at}` is not an RFC3339 timestamp: {e}"),
        )
    })?;
    let text = match obj.get("text") {
        None | Some(Value::Null) => return Err(reject("text", "missing required field".into())),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(reject(
                "text",
                format!("expected a string, found {}", json_type(other)),
            ));
        }
    };
    if text.trim().is_empty() {
        return Err(reject("text", "must not be empty".into()));
    }
    if text.len() as u64 > opts.max_text_bytes {
        return Err(reject(
            "text",
            format!(
                "{} bytes, over the limit of {} bytes (rejected, not truncated)",
                text.len(),
                opts.max_text_bytes
            ),
        ));
    }
    let flags = match obj.get("flags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut flags = Vec::with_capacity(items.len());
            for item in items {
                match item.as_str() {
                    Some(f) if FLAGS.contains(&f) => {
                        if !flags.iter().any(|x| x == f) {
                            flags.push(f.to_string());
                        }
                    }
                    Some(f) => {
                        return Err(reject(
                            "flags",
                            format!("unknown flag `{f}` (expected sensitive or safety)"),
                        ));
                    }
                    None => {
                        return Err(reject(
                            "flags",
                            format!("expected strings, found {}", json_type(item)),
                        ));
                    }
                }
            }
            flags
        }
        Some(other) => {
            return Err(reject(
                "flags",
                format!("expected a list of strings, found {}", json_type(other)),
            ));
        }
    };
    let user_id = match obj.get("user_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(reject(
                "user_id",
                format!("expected a string, found {}", json_type(other)),
            ));
        }
    };
    Ok(Record {
        id: id.to_string(),
        persona_id: persona_id.to_string(),
        kind,
        source_path: source_path.to_string(),
        created_at: created_at.to_string(),
        text: text.clone(),
        flags,
        user_id,
        origin,
    })
}

/// `created_at` of a journal: the date it starts with, else its mtime.
pub(crate) fn journal_created_at(
    text: &str,
    mtime: Option<std::time::SystemTime>,
) -> Option<String> {
    let first = text.lines().next().unwrap_or("");
    let first = first.trim_start_matches(['#', '*', ' ', '\t', '\u{feff}']);
    let token = first.split_whitespace().next().unwrap_or("");
    if let Ok(ts) = DateTime::parse_from_rfc3339(token) {
        return Some(ts.to_rfc3339_opts(SecondsFormat::AutoSi, true));
    }
    if let Some(date) = first
        .get(..10)
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
    {
        let next = first[10..].chars().next();
        if next.is_none_or(|c| !c.is_ascii_alphanumeric()) {
            return Some(format!("{}T00:00:00Z", date.format("%Y-%m-%d")));
        }
    }
    let mtime: DateTime<Utc> = mtime?.into();
    Some(mtime.to_rfc3339_opts(SecondsFormat::Secs, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Origin {
        Origin {
            source: "in.jsonl".into(),
            line: 3,
        }
    }

    fn good() -> Map<String, Value> {
        serde_json::from_str(
            r#"{"id":"j-1","persona_id":"ada","kind":"journal","source_path":"j/1.md",
                "created_at":"2026-11-28T21:00:00Z","text":"Keep it short."}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_good_record_passes_and_its_fingerprint_ignores_position() {
        let r = record_from_map(&good(), origin(), &IngestOptions::default()).unwrap();
        let mut moved = r.clone();
        moved.origin.line = 99;
        assert_eq!(r.fingerprint(), moved.fingerprint());
        moved.text.push('!');
        assert_ne!(r.fingerprint(), moved.fingerprint());
    }

    #[test]
    fn each_broken_field_is_named() {
        let cases: [(&str, Value, &str); 7] = [
            ("kind", Value::from("diary"), "unknown kind"),
            ("created_at", Value::from("yesterday"), "RFC3339"),
            ("text", Value::from("  "), "empty"),
            ("text", Value::from(5), "expected a string"),
            ("persona_id", Value::Null, "missing"),
            ("flags", serde_json::json!(["secret"]), "unknown flag"),
            ("user_id", Value::from(1), "expected a string"),
        ];
        for (field, value, needle) in cases {
            let mut m = good();
            m.insert(field.into(), value);
            let e = record_from_map(&m, origin(), &IngestOptions::default()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field));
            assert_eq!(e.record_id.as_deref(), Some("j-1"));
            assert!(e.error.contains(needle), "{field}: {}", e.error);
        }
    }

    #[test]
    fn over_long_text_is_rejected_not_truncated() {
        let mut m = good();
        m.insert("text".into(), Value::from("x".repeat(11)));
        let opts = IngestOptions {
            max_text_bytes: 10,
            ..Default::default()
        };
        let e = record_from_map(&m, origin(), &opts).unwrap_err();
        assert!(
            e.error.contains("11 bytes, over the limit of 10"),
            "{}",
            e.error
        );
    }

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
        assert_eq!(sha, crate::hash::sha256_bytes(&data), "every byte read is hashed");
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

    #[test]
    fn record_id_is_sniffed_from_broken_json() {
        assert_eq!(
            sniff_record_id(br#"{"record_id": "j-011", "tags": [{"#, "record_id"),
            Some("j-011".into())
        );
        assert_eq!(sniff_record_id(br#"{"tags": 1"#, "record_id"), None);
    }

    #[test]
    fn journal_dates_come_from_the_first_line_else_mtime() {
        assert_eq!(
            journal_created_at("# 2026-11-28 standup\nok", None).as_deref(),
            Some("2026-11-28T00:00:00Z")
        );
        assert_eq!(
            journal_created_at("2026-11-28T09:15:00+01:00 woke up", None).as_deref(),
            Some("2026-11-28T09:15:00+01:00")
        );
        assert_eq!(journal_created_at("2026-11-288 not a date", None), None);
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        assert_eq!(
            journal_created_at("no date", Some(t)).as_deref(),
            Some("1970-01-02T00:00:00Z")
        );
    }
}
