//! Opening the files tomlite writes in a staging directory without
//! following symbolic links.
//!
//! A link planted at `.lock`, `LATEST.tmp`, a state temp file or any other
//! name tomlite writes would otherwise make it truncate and write the file
//! the link points to. Every such open uses `O_NOFOLLOW` (the open fails on
//! a link at the last component) and files that are created afresh use
//! `O_CREAT | O_EXCL`, which never follows a link either; a stale regular
//! file of a killed run is removed first, a link or anything that is not a
//! regular file is refused with an error that names it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

#[cfg(unix)]
fn no_follow(opts: &mut OpenOptions) -> &mut OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    opts.custom_flags(libc::O_NOFOLLOW)
}

#[cfg(not(unix))]
fn no_follow(opts: &mut OpenOptions) -> &mut OpenOptions {
    opts
}

/// What is at `path` when it is not a regular file (a link, a folder, a
/// FIFO, a device…); `None` for a regular file or nothing.
pub fn not_a_file(path: &Path) -> Option<&'static str> {
    let meta = fs::symlink_metadata(path).ok()?;
    let t = meta.file_type();
    if t.is_symlink() {
        Some("a symbolic link")
    } else if t.is_dir() {
        Some("a directory")
    } else if !t.is_file() {
        Some("not a regular file")
    } else {
        None
    }
}

/// The error for a path that is not a regular file tomlite may write.
pub(crate) fn refused(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}: tomlite writes only regular files in a staging directory and never through a link; remove it and run again",
            path.display()
        ),
    )
}

/// Opens `path` with `opts` without following a link at its last
/// component; a link (or a FIFO, a device, a folder) is refused with an
/// error that says so.
pub fn open_no_follow(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(not(unix))]
    if let Some(what) = not_a_file(path) {
        return Err(refused(path, what));
    }
    let mut opts = opts.clone();
    match no_follow(&mut opts).open(path) {
        Ok(f) => {
            if !f.metadata()?.is_file() {
                return Err(refused(path, "not a regular file"));
            }
            Ok(f)
        }
        Err(e) => match not_a_file(path) {
            Some(what) => Err(refused(path, what)),
            None => Err(e),
        },
    }
}

/// Creates `path` afresh for writing (`O_CREAT | O_EXCL`, no link
/// followed). A regular file already there (a temp file a killed run left)
/// is removed first; a link or anything else is refused.
pub fn create_fresh(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    match open_no_follow(&opts, path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if let Some(what) = not_a_file(path) {
                return Err(refused(path, what));
            }
            fs::remove_file(path)?;
            open_no_follow(&opts, path)
        }
        other => other,
    }
}

/// Opens `path` for appending (created when absent) without following a
/// link.
pub fn open_append(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.create(true).append(true);
    open_no_follow(&opts, path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn no_open_writes_through_a_link() {
        // A link at a name tomlite writes must never reach its target.
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("LATEST.tmp");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = create_fresh(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = open_append(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let mut rw = OpenOptions::new();
        rw.read(true).write(true).create(true).truncate(false);
        assert!(open_no_follow(&rw, &link).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_stale_regular_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tmp");
        fs::write(&p, b"old and longer").unwrap();
        create_fresh(&p).unwrap().write_all(b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
    }
}
