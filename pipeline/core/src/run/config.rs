//! What a run is asked to do: its inputs, staging directory, policy and
//! operational limits, and the shard it takes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::graph::nodes::Registry;
use crate::ingest::record::IngestOptions;
use crate::rules::policy::Policy;
use crate::run::progress::ProgressMode;

/// Everything a run needs, resolved from the command line and the policy.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Record files or journal folders, in order.
    pub inputs: Vec<PathBuf>,
    /// The staging directory.
    pub staging: PathBuf,
    /// The effective policy.
    pub policy: Policy,
    /// Where the policy came from (`None`: the seed's defaults).
    pub policy_source: Option<PathBuf>,
    /// The node registry and where it came from.
    pub nodes: Option<(PathBuf, Registry)>,
    /// Ignore the state: process every record.
    pub full: bool,
    /// How records are checked.
    pub ingest: IngestOptions,
    /// The command line, for the status stream.
    pub command: String,
    /// Stop taking new records when this instant is near; commit what is
    /// done ([`crate::stage::receipt::StopCondition::Deadline`]).
    pub deadline: Option<Instant>,
    /// Process only the records of one shard.
    pub shard: Option<Shard>,
    /// Records per annotator call (default: the annotator's own).
    pub batch_size: Option<usize>,
    /// The run fails without committing when more than this share of the
    /// records annotated so far (at least [`MIN_FAILED_FOR_BUDGET`] of them)
    /// fails; records that failed in earlier runs are not counted.
    pub max_failed_share: f64,
    /// A record whose annotation alone takes longer fails.
    pub record_timeout: Option<Duration>,
    /// Seconds between heartbeats in `events.jsonl`.
    pub heartbeat: Duration,
    /// How progress is shown on stderr.
    pub progress: ProgressMode,
    /// The `committed` event's status code is 6 when poison records were
    /// skipped (the binary's `--escalate-poison`).
    pub escalate_poison: bool,
    /// Retries of a transient I/O error (the seed's default 1, at most
    /// [`tomlite_staging::retry::MAX_RETRIES`]).
    pub transient_retries: u32,
    /// Set by SIGTERM or SIGINT (the binary registers it): the run stops
    /// cleanly at its next check, without committing.
    pub interrupt: crate::run::interrupt::Interrupt,
}

impl RunConfig {
    /// A config with the operational defaults (no deadline, no shard,
    /// failure share 0.1, heartbeat 30 s, quiet).
    pub fn new(inputs: Vec<PathBuf>, staging: PathBuf, policy: Policy) -> Self {
        Self {
            inputs,
            staging,
            ingest: IngestOptions {
                max_text_bytes: policy.run.max_text_bytes,
                journal_persona: None,
            },
            policy,
            policy_source: None,
            nodes: None,
            full: false,
            command: String::new(),
            deadline: None,
            shard: None,
            batch_size: None,
            max_failed_share: DEFAULT_MAX_FAILED_SHARE,
            record_timeout: None,
            heartbeat: crate::run::events::HEARTBEAT,
            progress: ProgressMode::Quiet,
            escalate_poison: false,
            transient_retries: tomlite_staging::retry::DEFAULT_RETRIES,
            interrupt: crate::run::interrupt::Interrupt::default(),
        }
    }
}

/// Default of [`RunConfig::max_failed_share`].
pub const DEFAULT_MAX_FAILED_SHARE: f64 = 0.1;
/// A batch fails the run only with at least this many failed records.
pub const MIN_FAILED_FOR_BUDGET: u64 = 3;

/// One shard of `count`: the records whose persona hashes to `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards.
    pub count: u32,
}

impl Shard {
    /// Parses `K/N` (`0 <= K < N`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("shard `{s}`: expected K/N, e.g. 0/4"))?;
        let index: u32 = k
            .trim()
            .parse()
            .map_err(|_| format!("shard `{s}`: K is not a number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard `{s}`: N is not a number"))?;
        if count == 0 || index >= count {
            return Err(format!("shard `{s}`: need 0 <= K < N"));
        }
        Ok(Self { index, count })
    }

    /// The shard a persona belongs to: the first 8 bytes of sha256(persona)
    /// modulo the count. Stable across machines and releases.
    pub fn of(persona_id: &str, count: u32) -> u32 {
        use sha2::Digest as _;
        let h = sha2::Sha256::digest(persona_id.as_bytes());
        let x = u64::from_be_bytes(h[..8].try_into().expect("8 bytes"));
        (x % u64::from(count)) as u32
    }

    /// Whether a record of this persona is this shard's.
    pub fn owns(&self, persona_id: &str) -> bool {
        Self::of(persona_id, self.count) == self.index
    }
}
