//! Bytes before records: regular files opened without following links,
//! files stamped against change while read, reads hashed as they go, lines
//! read with a cap, and encodings or binary formats told from a file's head.

use std::fs::File;
use std::io::{BufRead, Read};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};

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
    pub(crate) bytes: u64,
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
