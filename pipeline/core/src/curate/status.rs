//! `tomlite curate status`: what is pending, decided and applied. The
//! run's queues are read one record batch at a time, and only the columns
//! counted (a view of the queue), so a night of any size is summed in
//! little memory.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use tomlite_staging::State;

use super::apply::DecisionLines;
use super::curated::{CurateError, Curated, CuratedRow, each_row};
use crate::stage::tables::{Quarantine, row, staged_view};

/// The confidence bins of the agreement figures: under 0.5, then tenths.
const BINS: [(f64, f64, &str); 6] = [
    (0.0, 0.5, "0.0-0.5"),
    (0.5, 0.6, "0.5-0.6"),
    (0.6, 0.7, "0.6-0.7"),
    (0.7, 0.8, "0.7-0.8"),
    (0.8, 0.9, "0.8-0.9"),
    (0.9, 1.0, "0.9-1.0"),
];

/// Whether the curator agreed with one head on one decided item, and the
/// head's confidence then; `None` when the decision says nothing about
/// that head (a rejected tag's affect, a head without a confidence).
fn agreed(r: &CuratedRow, head: &str) -> Option<(f64, bool)> {
    let accepted_or_relabelled = r.decision == "accept" || r.decision == "relabel";
    match (head, r.item_type.as_str()) {
        ("tom_kind", "tag") | ("edges", "edge") => Some((
            r.confidence?,
            r.decision == "accept" || (r.decision == "relabel" && r.label == r.original_label),
        )),
        ("affect", "tag") if accepted_or_relabelled => Some((
            r.affect_confidence?,
            r.decided_affect.is_none() || r.decided_affect == r.affect,
        )),
        ("intensity", "tag") if accepted_or_relabelled => Some((
            r.intensity_confidence?,
            r.decided_intensity.is_none() || r.decided_intensity == r.intensity,
        )),
        _ => None,
    }
}

/// How often the curator agreed with each head (tom_kind, affect,
/// intensity, edges) per confidence bin, bulk decisions counted apart, and
/// whether, on this user's one-by-one decisions, the items at or above
/// each of the seed's promotion thresholds were at least as often right
/// as the threshold claims. The thresholds are not changed by it.
fn agreement(curated: &Curated) -> Value {
    let policy = crate::rules::policy::Policy::default();
    let tags = &policy.tom_lite_promotion_policy.promote_tags_when;
    let thresholds = [
        ("tom_kind", tags.tom_kind_confidence_min),
        ("affect", tags.affect_confidence_min),
        ("intensity", tags.intensity_confidence_min),
        (
            "edges",
            policy
                .tom_lite_promotion_policy
                .promote_edges_when
                .edge_confidence_min,
        ),
    ];
    let mut out = serde_json::Map::new();
    for (head, threshold) in thresholds {
        let mut bins = vec![(0u64, 0u64); BINS.len()];
        let (mut bulk, mut bulk_agreed) = (0u64, 0u64);
        let (mut above, mut above_agreed) = (0u64, 0u64);
        for r in curated.rows() {
            let Some((confidence, yes)) = agreed(r, head) else {
                continue;
            };
            if r.bulk {
                bulk += 1;
                bulk_agreed += u64::from(yes);
                continue;
            }
            let at = BINS
                .iter()
                .position(|&(lo, hi, _)| confidence >= lo && (confidence < hi || hi >= 1.0))
                .unwrap_or(0);
            bins[at].0 += 1;
            bins[at].1 += u64::from(yes);
            if confidence >= threshold {
                above += 1;
                above_agreed += u64::from(yes);
            }
        }
        let rate = |n: u64, k: u64| (n > 0).then(|| k as f64 / n as f64);
        let rows: Vec<Value> = BINS
            .iter()
            .zip(&bins)
            .map(|(&(_, _, name), &(n, k))| json!({"bin": name, "decided": n, "agreed": k, "rate": rate(n, k)}))
            .collect();
        let holds = rate(above, above_agreed).map(|r| r >= threshold);
        out.insert(
            head.to_string(),
            json!({
                "threshold": threshold,
                "bins": rows,
                "at_or_above_threshold": {"decided": above, "agreed": above_agreed, "rate": rate(above, above_agreed)},
                "threshold_holds": holds,
                "bulk": {"decided": bulk, "agreed": bulk_agreed},
            }),
        );
    }
    Value::Object(out)
}

row! {
    /// What status reads of a queued item: the columns it counts.
    pub struct QueueCount<'a> {
        /// The record.
        pub record_id: &'a str,
        /// The item.
        pub item_id: &'a str,
        /// `tag`, `edge` or `annotation`.
        pub item_type: &'a str,
        /// Why it is queued.
        pub reasons: &'a [&'a str],
    }
}

staged_view!(
    /// A run's queue as status counts it ([`QueueCount`]).
    QueueCounts,
    Quarantine,
    QueueCount
);

/// What status counts of one run's queue.
#[derive(Default)]
struct RunCounts {
    queued: u64,
    open: u64,
}

/// What is pending over every run: the open items by their first reason
/// and by item type.
#[derive(Default)]
struct Pending {
    total: u64,
    by_reason: BTreeMap<String, u64>,
    by_type: BTreeMap<String, u64>,
}

/// Counts one run's queue (`path`), one record batch at a time, reading
/// only the columns of [`QueueCount`]: every row is queued; a row whose
/// record the run last processed and whose item has no decision is open.
fn count_queue(
    path: &Path,
    run: &str,
    state: &State,
    curated: &Curated,
    pending: &mut Pending,
) -> Result<RunCounts, CurateError> {
    let mut counts = RunCounts::default();
    each_row::<QueueCounts>(path, |item| {
        counts.queued += 1;
        let current = state
            .get(item.record_id)
            .is_some_and(|e| state.run(e) == run);
        if !current || curated.contains(run, item.item_id) {
            return;
        }
        counts.open += 1;
        pending.total += 1;
        *pending
            .by_type
            .entry(item.item_type.to_string())
            .or_default() += 1;
        if let Some(reason) = item.reasons.first() {
            *pending.by_reason.entry(reason.to_string()).or_default() += 1;
        }
    })?;
    Ok(counts)
}

/// What is pending, decided and applied in a staging directory. Pending:
/// queued items of the run that last processed their record, with no
/// decision yet. With `decisions`, also how many of that file's lines are
/// not applied yet. The queues are streamed ([`count_queue`]).
pub fn status(staging: &Path, decisions: Option<&Path>) -> Result<Value, CurateError> {
    let state = State::load(&staging.join("state"))?;
    let curated = Curated::load(staging)?;
    let mut pending = Pending::default();
    let mut per_run = Vec::new();
    for run in state.runs() {
        let path = staging.join("runs").join(run).join("quarantine.parquet");
        if !path.is_file() {
            continue;
        }
        let counts = count_queue(&path, run, &state, &curated, &mut pending)?;
        per_run.push(json!({"run_id": run, "queued": counts.queued, "pending": counts.open}));
    }
    let (pending, pending_by_reason, pending_by_type) =
        (pending.total, pending.by_reason, pending.by_type);
    let mut by_decision: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_curator: BTreeMap<String, u64> = BTreeMap::new();
    for r in curated.rows() {
        *by_decision.entry(r.decision.clone()).or_default() += 1;
        *by_curator.entry(r.curator.clone()).or_default() += 1;
    }
    let last_applied = curated.rows().map(|r| r.applied_at.clone()).max();
    let agreement = agreement(&curated);
    let mut out = json!({
        "pending": pending,
        "pending_by_reason": pending_by_reason,
        "pending_by_type": pending_by_type,
        "runs": per_run,
        "applied": curated.len(),
        "applied_by_decision": by_decision,
        "applied_by_curator": by_curator,
        "last_applied_at": last_applied,
        "agreement": agreement,
    });
    if let Some(d) = decisions {
        let io = |source| CurateError::Io {
            path: d.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(d).map_err(io)?;
        let (mut lines, mut not_applied) = (0u64, 0u64);
        for l in DecisionLines::new(file) {
            let (_, l) = l.map_err(io)?;
            lines += 1;
            let v: Value = l
                .ok()
                .and_then(|l| serde_json::from_str(&l).ok())
                .unwrap_or(Value::Null);
            let run = v["run_id"].as_str().unwrap_or("");
            let item = v["item_id"].as_str().unwrap_or("");
            let applied = curated.rows.get(&(run.to_string(), item.to_string()));
            let same = applied.is_some_and(|r| {
                Some(r.decision.as_str()) == v["decision"].as_str()
                    && r.decided_at.as_str() == v["decided_at"].as_str().unwrap_or("")
            });
            if !same {
                not_applied += 1;
            }
        }
        out["decisions_file"] = json!({"path": d.display().to_string(), "lines": lines, "decided_not_applied": not_applied});
    }
    Ok(out)
}
