//! What a person or a log sees while a run works: a progress bar with rate
//! and ETA when stderr is a terminal, a plain line every few seconds when it
//! is not (cron, CI, a log file), nothing with `--quiet`.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing but errors.
    Quiet,
    /// A bar redrawn in place on stderr.
    Bar,
    /// A plain line on stderr every `every`.
    Log {
        /// Seconds between lines.
        every: Duration,
    },
}

impl ProgressMode {
    /// A bar on a terminal, log lines every `every` otherwise; `quiet` wins.
    pub fn detect(quiet: bool, every: Duration) -> Self {
        if quiet {
            Self::Quiet
        } else if std::io::stderr().is_terminal() {
            Self::Bar
        } else {
            Self::Log { every }
        }
    }
}

/// A run's progress display.
#[derive(Debug)]
pub struct Progress {
    mode: ProgressMode,
    total: Option<u64>,
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// `total`: the records the inputs are expected to hold, if known.
    pub fn new(mode: ProgressMode, total: Option<u64>) -> Self {
        Self {
            mode,
            total,
            started: Instant::now(),
            last: None,
            drawn: false,
        }
    }

    /// Reports `done` records read; draws when it is time to.
    pub fn update(&mut self, done: u64, processed: u64) {
        let due = match self.mode {
            ProgressMode::Quiet => false,
            ProgressMode::Bar => self
                .last
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(200)),
            ProgressMode::Log { every } => self
                .last
                .map_or(self.started.elapsed() >= every, |t| t.elapsed() >= every),
        };
        if due {
            self.draw(done, processed);
        }
    }

    /// Ends the display (a bar gets its newline).
    pub fn finish(&mut self, done: u64, processed: u64) {
        match self.mode {
            ProgressMode::Quiet => {}
            ProgressMode::Bar => {
                self.draw(done, processed);
                eprintln!();
            }
            ProgressMode::Log { .. } => {
                if self.drawn {
                    self.draw(done, processed);
                }
            }
        }
    }

    fn draw(&mut self, done: u64, processed: u64) {
        self.last = Some(Instant::now());
        self.drawn = true;
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let rate = done as f64 / secs;
        let (share, eta) = match self.total.filter(|&t| t > 0) {
            Some(t) => {
                let share = (done as f64 / t as f64).min(1.0);
                let left = t.saturating_sub(done) as f64;
                let eta = if rate > 0.0 {
                    format_secs(left / rate)
                } else {
                    "?".into()
                };
                (Some(share), eta)
            }
            None => (None, "?".into()),
        };
        let total = self.total.map_or("?".to_string(), |t| t.to_string());
        let mut err = std::io::stderr().lock();
        match self.mode {
            ProgressMode::Bar => {
                let width = 24;
                let filled = share.map_or(0, |s| (s * width as f64).round() as usize);
                let _ = write!(
                    err,
                    "\r[{}{}] {done}/{total} records, {processed} annotated, {rate:.0}/s, ETA {eta}   ",
                    "#".repeat(filled),
                    "-".repeat(width - filled)
                );
                let _ = err.flush();
            }
            ProgressMode::Log { .. } => {
                let pct = share.map_or(String::new(), |s| format!(" ({:.0}%)", s * 100.0));
                let _ = writeln!(
                    err,
                    "tomlite: progress: {done}/{total} records{pct}, {processed} annotated, {rate:.0} records/s, ETA {eta}"
                );
            }
            ProgressMode::Quiet => {}
        }
    }
}

fn format_secs(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// The records an input is expected to hold: lines of a JSONL file, rows of
/// a Parquet file, journal files of a folder. `None` when it cannot tell.
pub fn estimate_records(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        return crate::ingest::journals::count(path);
    }
    if !meta.is_file() {
        // A pipe is read once, by the run: never here.
        return None;
    }
    if path.extension().is_some_and(|e| e == "parquet") {
        let file = std::fs::File::open(path).ok()?;
        let reader = parquet::file::serialized_reader::SerializedFileReader::new(file).ok()?;
        use parquet::file::reader::FileReader;
        return u64::try_from(reader.metadata().file_metadata().num_rows()).ok();
    }
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = std::io::Read::read(&mut f, &mut buf).ok()?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Some(lines + u64::from(last != b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_count_lines_with_or_without_a_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        std::fs::write(&a, "{}\n{}\n{}").unwrap();
        assert_eq!(estimate_records(&a), Some(3));
        std::fs::write(&a, "{}\n{}\n").unwrap();
        assert_eq!(estimate_records(&a), Some(2));
        std::fs::write(&a, "").unwrap();
        assert_eq!(estimate_records(&a), Some(0));
        assert_eq!(format_secs(75.0), "1m15s");
        assert_eq!(format_secs(3700.0), "1h01m");
    }
}
