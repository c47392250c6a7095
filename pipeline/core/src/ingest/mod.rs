//! Reading records: the record types, JSONL, Parquet and journal folders,
//! each input hashed as it is read. [`open_input`] is the one entry: it
//! picks the reader by what the path is.

pub mod bytes;
pub mod journals;
pub mod jsonl;
pub mod parquet;
pub mod record;

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use self::bytes::{HashingRead, Stamp, Tally, file_kind};
use self::jsonl::{jsonl_items, line_cap};
use self::record::{IngestError, IngestOptions, InputSha, Items};

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
