//! `tomlite merge`: joins the committed runs of every shard of a sharded
//! night (`run --shard K/N`, one staging directory per shard) into one
//! committed run in another staging directory.
//!
//! A merge is refused, with nothing written, unless it gets exactly one
//! complete run of each shard `0..N`, all run on the same inputs (sha256),
//! policy, annotator and node registry. The merged run holds every shard's
//! rows (in shard order, `run_id` set to the merged run), a receipt whose
//! counts are the shards' sums and which lists the shard runs, a report, and
//! a state that is the union of the shards' states.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value, json};

use crate::stage::receipt::{AnnotatorReceipt, MergedShard, Outcome, Receipt};
use tomlite_staging::{StagingDir, State, StateRow};

use crate::graph::nodes::Registry;
use crate::rules::policy::Policy;
use crate::run::events::{Event, EventLog};
use crate::run::summary::RunSummary;
use crate::stage::receipt::StopCondition;

/// The tables a run directory holds.
pub const TABLES: [&str; 6] = crate::stage::tables::RUN_TABLES;

/// Why a merge did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The runs given are not one complete, matching run per shard.
    #[error("merge refused: {message}")]
    Refused {
        /// What is wrong, naming the shard and run.
        message: String,
    },
    /// The target staging directory failed (including: locked).
    #[error(transparent)]
    Staging(#[from] tomlite_staging::Error),
    /// A shard's file cannot be read.
    #[error("cannot read {}: {message}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The merged report cannot be built.
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

fn refused(message: impl Into<String>) -> MergeError {
    MergeError::Refused {
        message: message.into(),
    }
}

struct ShardRun {
    dir: PathBuf,
    run_id: String,
    index: u32,
    count: u32,
    receipt: Receipt,
    receipt_sha256: String,
}

fn read_shard(dir: &Path) -> Result<ShardRun, MergeError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with(tomlite_staging::TMP_PREFIX) {
        return Err(refused(format!(
            "{} is an unfinished run (a temporary directory): run that shard again",
            dir.display()
        )));
    }
    let path = dir.join("receipt.json");
    let bytes = std::fs::read(&path).map_err(|e| {
        refused(format!(
            "{} is not a committed run: cannot read its receipt.json ({e})",
            dir.display()
        ))
    })?;
    let receipt = Receipt::from_json(&bytes).map_err(|e| MergeError::Read {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let run_id = receipt.run_id.clone();
    let Some((index, count)) = receipt.shard().map(|s| (s.index, s.count)) else {
        return Err(refused(format!(
            "run {run_id} ({}) was not run with --shard K/N",
            dir.display()
        )));
    };
    // Committed means: its staging directory's state lists it.
    let root = dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| refused(format!("{} is not inside <staging>/runs/", dir.display())))?;
    let state = State::load(&root.join("state"))?;
    if !state.runs().contains(&run_id) {
        return Err(refused(format!(
            "shard {index} run {run_id} is not committed in {} (a killed run: run the shard again, which recovers it)",
            root.display()
        )));
    }
    // Its tables must be the ones it sealed: a table replaced or edited
    // after the commit would be merged as if it were the shard's.
    let check = crate::stage::verify::verify_run(dir);
    if !check.differences.is_empty() {
        return Err(refused(format!(
            "shard {index} run {run_id} ({}) does not match its sealed receipt: {}",
            dir.display(),
            check.differences.join("; ")
        )));
    }
    if receipt.stop_condition != Some(StopCondition::InputExhausted) {
        return Err(refused(format!(
            "shard {index} run {run_id} is partial (stop_condition {}): run the shard again until it completes",
            Value::from(receipt.stop_condition.map(StopCondition::as_str))
        )));
    }
    Ok(ShardRun {
        dir: dir.to_path_buf(),
        run_id,
        index,
        count,
        receipt,
        receipt_sha256: crate::hash::sha256_bytes(&bytes),
    })
}

/// What must be equal across shards, with a name for the refusal.
fn identity(r: &Receipt) -> [(&'static str, Value); 4] {
    let inputs: Vec<Value> = r
        .inputs
        .iter()
        .map(|i| Value::from(i.sha256.as_str()))
        .collect();
    [
        ("inputs (sha256)", Value::Array(inputs)),
        ("policy", Value::from(r.policy_sha256.as_str())),
        ("annotator", Value::from(r.annotator.sha256.as_str())),
        (
            "node registry",
            Value::from(r.nodes.as_ref().and_then(|n| n.sha256.clone())),
        ),
    ]
}

/// Checks the runs and returns them ordered by shard index.
fn check(runs: &[PathBuf]) -> Result<Vec<ShardRun>, MergeError> {
    let mut shards: Vec<ShardRun> = runs
        .iter()
        .map(|d| read_shard(d))
        .collect::<Result<_, _>>()?;
    shards.sort_by_key(|s| s.index);
    let count = shards[0].count;
    if let Some(s) = shards.iter().find(|s| s.count != count) {
        return Err(refused(format!(
            "run {} is shard {}/{} but run {} is shard {}/{}",
            s.run_id, s.index, s.count, shards[0].run_id, shards[0].index, count
        )));
    }
    for w in shards.windows(2) {
        if w[0].index == w[1].index {
            return Err(refused(format!(
                "shard {} given twice: runs {} and {}",
                w[0].index, w[0].run_id, w[1].run_id
            )));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|k| !shards.iter().any(|s| s.index == *k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(refused(format!(
            "shard(s) {} of {count} missing",
            missing.join(", ")
        )));
    }
    let first = identity(&shards[0].receipt);
    for s in &shards[1..] {
        for ((what, a), (_, b)) in first.iter().zip(identity(&s.receipt)) {
            if *a != b {
                return Err(refused(format!(
                    "shard {} (run {}) ran on other {what} than shard 0 (run {}): {b} vs {a}",
                    s.index, s.run_id, shards[0].run_id
                )));
            }
        }
    }
    Ok(shards)
}

/// Shard runs that earlier merges into `staging` took.
fn merged_before(staging: &Path) -> Vec<String> {
    let runs = staging.join("runs");
    let Ok(entries) = std::fs::read_dir(&runs) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let receipt = std::fs::read(e.path().join("receipt.json"))
            .ok()
            .and_then(|b| Receipt::from_json(&b).ok());
        for shard in receipt
            .into_iter()
            .flat_map(|r| r.merged_from.unwrap_or_default())
        {
            out.push(shard.run_id);
        }
    }
    out
}

/// A shard run that skipped records another run of the same shard
/// committed holds only the rest: merging it alone would lose those rows
/// unless an earlier merge took that run.
fn refuse_lost_rows(shards: &[ShardRun], staging: &Path) -> Result<(), MergeError> {
    let before = merged_before(staging);
    for s in shards {
        if before.contains(&s.run_id) {
            return Err(refused(format!(
                "shard {} run {} was already merged into {}",
                s.index,
                s.run_id,
                staging.display()
            )));
        }
        let root = s
            .dir
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let own = State::load(&root.join("state"))?;
        for (run, n) in &s.receipt.skipped_from_runs {
            if own.runs().contains(run) && !before.contains(run) {
                return Err(refused(format!(
                    "shard {} run {} skipped {n} records that run {run} of the same shard committed, and no merge into {} took run {run}: merging {} alone would lose them; merge the runs of run {run}'s night first (or rerun the shard with --full)",
                    s.index,
                    s.run_id,
                    staging.display(),
                    s.run_id
                )));
            }
        }
    }
    Ok(())
}

/// The staging directory a shard run was committed in.
fn shard_root(s: &ShardRun) -> &Path {
    s.dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
}

/// A merged run's state is the union of every shard's. Committed into a
/// shard's staging directory, it would become part of that shard's history
/// (the shard's next run skips records as "from" the merged run, which no
/// merge took), so every later night's merge would be refused. Refused up
/// front: the target is one of the shards' staging directories, or holds a
/// shard run of any night.
fn refuse_shard_target(shards: &[ShardRun], staging: &Path) -> Result<(), MergeError> {
    // A target that does not exist yet is no shard's directory.
    let Ok(target) = std::fs::canonicalize(staging) else {
        return Ok(());
    };
    for s in shards {
        if std::fs::canonicalize(shard_root(s)).is_ok_and(|r| r == target) {
            return Err(refused(format!(
                "{} is the staging directory of shard {} (run {}): a merged run holds every shard's records, and committed into a shard's own directory it would block that shard's merges on every later night; merge into a staging directory of its own",
                staging.display(),
                s.index,
                s.run_id
            )));
        }
    }
    let state = State::load(&target.join("state"))?;
    for run in state.runs() {
        let receipt = std::fs::read(target.join("runs").join(run).join("receipt.json"))
            .ok()
            .and_then(|b| Receipt::from_json(&b).ok());
        if let Some(shard) = receipt.as_ref().and_then(Receipt::shard) {
            return Err(refused(format!(
                "{} holds shard run {run} (shard {}/{}): it is a shard's staging directory, and a merged run committed there would block that shard's merges on every later night; merge into a staging directory of its own",
                staging.display(),
                shard.index,
                shard.count
            )));
        }
    }
    Ok(())
}

/// Replaces the `run_id` column of a batch with `run_id`.
fn with_run_id(batch: RecordBatch, run_id: &str) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = batch.schema();
    let Ok(ix) = schema.index_of("run_id") else {
        return Ok(batch);
    };
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    cols[ix] = Arc::new(StringArray::from(vec![run_id; batch.num_rows()]));
    RecordBatch::try_new(schema, cols)
}

/// Adds `part`'s counts per key to `total`'s.
fn add_per_key(total: &mut BTreeMap<String, u64>, part: &BTreeMap<String, u64>) {
    for (key, n) in part {
        *total.entry(key.clone()).or_default() += n;
    }
}

/// Appends `more` to `list`, which keeps its first 100 entries.
fn append_first_100<T: Clone>(list: &mut Vec<T>, more: &[T]) {
    list.extend(more.iter().cloned());
    list.truncate(100);
}

/// The merged run's receipt: the shards' sums and concatenations, and
/// what every shard shares from shard 0's. `attempts`: the most attempts
/// one I/O operation took here.
fn merged_receipt(
    shards: &[ShardRun],
    run_id: &str,
    (started, clock): (chrono::DateTime<chrono::Utc>, std::time::Instant),
    attempts: u64,
    recovered: Vec<String>,
) -> Receipt {
    let mut merged = Receipt {
        attempts,
        ..Receipt::default()
    };
    for shard in shards {
        let part = &shard.receipt;
        merged.counts.add(&part.counts);
        add_per_key(&mut merged.reasons, &part.reasons);
        add_per_key(&mut merged.skipped_from_runs, &part.skipped_from_runs);
        // A receipt from before the `sensitive` table has none to add.
        merged.sensitive.merge(&part.sensitive);
        append_first_100(&mut merged.memory_links, &part.memory_links);
        append_first_100(&mut merged.failed, &part.failed);
        append_first_100(&mut merged.poison, &part.poison);
        merged.retries_used += part.retries_used;
        merged.attempts = merged.attempts.max(part.attempts);
    }
    // Every shard read every line; the merged run has no other shard.
    merged.counts.other_shards = 0;
    let first = &shards[0].receipt;
    Receipt {
        run_id: run_id.to_string(),
        status: Outcome::Committed,
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        duration_seconds: clock.elapsed().as_secs_f64(),
        inputs: first.inputs.clone(),
        annotator: AnnotatorReceipt {
            id: first.annotator.id.clone(),
            sha256: first.annotator.sha256.clone(),
            stats: shards
                .iter()
                .map(|s| s.receipt.annotator.stats.clone())
                .collect(),
            sensitive_detectors: first.annotator.sensitive_detectors.clone(),
        },
        nodes: first.nodes.clone(),
        policy_sha256: first.policy_sha256.clone(),
        policy_source: first.policy_source.clone(),
        full: first.full,
        merged_from: Some(
            shards
                .iter()
                .map(|s| MergedShard {
                    shard: s.index,
                    count: s.count,
                    run_id: s.run_id.clone(),
                    run_dir: s.dir.display().to_string(),
                    receipt_sha256: s.receipt_sha256.clone(),
                    duration_seconds: Some(s.receipt.duration_seconds),
                })
                .collect(),
        ),
        recovered,
        stop_condition: Some(StopCondition::InputExhausted),
        resumable: false,
        ..merged
    }
}

/// Copies every shard's tables into the merged run, in shard order, with
/// `run_id` set to the merged run's; returns the files written.
fn copy_tables(
    shards: &[ShardRun],
    run: &mut tomlite_staging::RunDir,
    run_id: &str,
) -> Result<Vec<String>, MergeError> {
    let mut paths = Vec::new();
    for name in TABLES {
        let mut writer = None;
        for s in shards {
            let path = s.dir.join(format!("{name}.parquet"));
            let read_err = |message: String| MergeError::Read {
                path: path.clone(),
                message,
            };
            let file = std::fs::File::open(&path).map_err(|e| read_err(e.to_string()))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| read_err(e.to_string()))?;
            let schema = reader.schema().clone();
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(run.table(name, schema)?),
            };
            for batch in reader.build().map_err(|e| read_err(e.to_string()))? {
                let batch = batch
                    .and_then(|b| with_run_id(b, run_id))
                    .map_err(|e| read_err(e.to_string()))?;
                w.write(&batch)?;
            }
        }
        if let Some(w) = writer {
            paths.push(w.close()?.display().to_string());
        }
    }
    Ok(paths)
}

/// The merged run's report, then its receipt, written last: it seals
/// every file written before it.
fn write_report_and_receipt(
    out: &StagingDir,
    run: &mut tomlite_staging::RunDir,
    receipt: Receipt,
    (policy, registry): (&Policy, Option<&Registry>),
) -> Result<(), MergeError> {
    let previous = crate::report::previous_receipt(out)?;
    let data = crate::report::data(&crate::report::ReportInput {
        dir: run.path(),
        receipt: &receipt,
        previous,
        policy,
        registry,
    })?;
    run.write_file("report.html", crate::report::html(&data).as_bytes())?;
    run.write_file("report.md", crate::report::markdown(&data).as_bytes())?;
    let receipt = crate::stage::verify::sealed(receipt, run.path())?;
    run.write_json("receipt.json", &receipt)?;
    Ok(())
}

/// Adds every shard's state to `state`, this night's rows credited to the
/// merged run.
fn union_states(shards: &[ShardRun], state: &mut State, run_id: &str) -> Result<(), MergeError> {
    for s in shards {
        let shard_state = State::load(&shard_root(s).join("state"))?;
        for row in shard_state.rows() {
            let run_id = if row.run_id == s.run_id {
                run_id
            } else {
                row.run_id
            };
            state.upsert(StateRow { run_id, ..row });
        }
    }
    Ok(())
}

/// The shard runs, once they are one complete, matching run per shard,
/// none of them the target, none losing a row the target holds, and run
/// with `policy`.
fn accepted_shards(
    runs: &[PathBuf],
    staging: &Path,
    policy: &Policy,
) -> Result<Vec<ShardRun>, MergeError> {
    if runs.is_empty() {
        return Err(refused("no shard runs given"));
    }
    let shards = check(runs)?;
    refuse_shard_target(&shards, staging)?;
    refuse_lost_rows(&shards, staging)?;
    let ran_with = shards[0].receipt.policy_sha256.as_str();
    if ran_with != policy.sha256() {
        return Err(refused(format!(
            "the shards ran with policy {ran_with}, not {}: pass --policy with the shards' policy",
            policy.sha256()
        )));
    }
    Ok(shards)
}

/// A merged run's event stream that cannot be written.
fn events_error(events_path: &Path, source: std::io::Error) -> MergeError {
    MergeError::Read {
        path: events_path.to_path_buf(),
        message: format!("cannot write events: {source}"),
    }
}

/// What one merge writes with: the shard runs, the target staging
/// directory, the merged run's id and start, the policy and registry.
struct Merging<'a> {
    shards: &'a [ShardRun],
    out: &'a StagingDir,
    run_id: &'a str,
    started: (chrono::DateTime<chrono::Utc>, std::time::Instant),
    policy: &'a Policy,
    registry: Option<&'a Registry>,
}

/// Writes the merged run (events, every shard's tables, the report and
/// the sealed receipt) and adds the shards' states to `state`; returns the
/// receipt. `recovered`: what the target's recovery removed.
fn write_merged_run(
    merging: &Merging<'_>,
    run: &mut tomlite_staging::RunDir,
    state: &mut State,
    recovered: Vec<String>,
) -> Result<Receipt, MergeError> {
    let events_path = run.path().join("events.jsonl");
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut events = EventLog::open(&events_path, merging.run_id, &command)
        .map_err(|e| events_error(&events_path, e))?;
    events
        .emit(Event {
            phase: "start",
            current_artifact: Some(run.path()),
            counts: json!({"shards": merging.shards.len()}),
            paths: merging
                .shards
                .iter()
                .map(|shard| shard.dir.display().to_string())
                .collect(),
            next_step: "copy every shard's tables into the merged run",
            stop_condition: "every shard copied",
            ..Default::default()
        })
        .map_err(|e| events_error(&events_path, e))?;
    let paths = copy_tables(merging.shards, run, merging.run_id)?;
    // The most attempts one I/O operation took, in a shard or here.
    let attempts = u64::from(merging.out.retry().max_attempts());
    let receipt = merged_receipt(
        merging.shards,
        merging.run_id,
        merging.started,
        attempts,
        recovered,
    );
    let report_with = (merging.policy, merging.registry);
    write_report_and_receipt(merging.out, run, receipt.clone(), report_with)?;
    // The state: every shard's, this night's rows credited to the merged run.
    union_states(merging.shards, state, merging.run_id)?;
    events
        .emit(Event {
            phase: "commit",
            current_artifact: Some(run.path()),
            counts: serde_json::to_value(&receipt.counts).unwrap_or_default(),
            paths,
            next_step: "rename the run directory, then replace state and LATEST",
            stop_condition: "LATEST names this run",
            ..Default::default()
        })
        .map_err(|e| events_error(&events_path, e))?;
    Ok(receipt)
}

/// Merges one complete run per shard into a new committed run in `staging`.
/// `policy`: the policy the shards ran with (its sha256 must match theirs);
/// `registry`: their node registry, for the report's edge details.
pub fn merge(
    runs: &[PathBuf],
    staging: &Path,
    policy: &Policy,
    registry: Option<&Registry>,
) -> Result<RunSummary, MergeError> {
    let shards = accepted_shards(runs, staging, policy)?;
    let started = chrono::Utc::now();
    let clock = std::time::Instant::now();
    let out = StagingDir::open(staging)?;
    let recovered = out.recover()?.describe();
    let mut state = out.load_state()?;
    let run_id = crate::run::run_id::new_run_id(&out.runs_dir(), started);
    let mut run = out.begin_run(&run_id)?;
    let tmp = run.path().to_path_buf();
    let merging = Merging {
        shards: &shards,
        out: &out,
        run_id: &run_id,
        started: (started, clock),
        policy,
        registry,
    };
    let receipt = match write_merged_run(&merging, &mut run, &mut state, recovered) {
        Ok(receipt) => receipt,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let run_dir = run.commit(&mut state, out.retry())?;
    Ok(RunSummary {
        run_id,
        run_dir,
        counts: receipt.counts,
        reasons: receipt.reasons,
        sensitive: receipt.sensitive,
        skipped_from: receipt.skipped_from_runs.into_keys().collect(),
        recovered: receipt.recovered,
        stop_condition: StopCondition::InputExhausted,
        retries_used: u32::try_from(receipt.retries_used).unwrap_or(u32::MAX),
        unread: Vec::new(),
    })
}
