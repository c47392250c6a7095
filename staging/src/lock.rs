use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::Error;

/// The exclusive lock on a staging directory (`<root>/.lock`).
///
/// The operating system releases it when the process ends, however it ends,
/// so a killed run never leaves a stale lock. The holder writes its pid into
/// the file so that a refused run can say who holds it.
#[derive(Debug)]
pub struct StagingLock {
    _file: File,
    path: PathBuf,
}

impl StagingLock {
    /// Takes the lock or fails with [`Error::Locked`] naming the holder.
    pub fn acquire(root: &Path) -> Result<Self, Error> {
        let path = root.join(".lock");
        // Never through a link: a `.lock` planted as a link to another file
        // would otherwise have that file truncated and overwritten.
        let mut file = crate::files::open_no_follow(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(|source| Error::io("open lock file", &path, source))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // The holder may be between truncate and write: an empty
                // answer is still a refusal.
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::Locked {
                    path,
                    holder: if holder.is_empty() {
                        "another process".to_string()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(source)) => {
                return Err(Error::io("lock", &path, source));
            }
        }
        let me = format!(
            "pid {} (since {})\n",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        );
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .and_then(|()| file.write_all(me.as_bytes()))
            .and_then(|()| file.flush())
            .map_err(|source| Error::io("write lock file", &path, source))?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
