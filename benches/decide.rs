//! Validate + decide: an annotation line parsed into an [`Annotation`] and
//! decided against the policy (vocabulary, verbatim quotes, thresholds,
//! edge targets), per record, on the bundled sample night.
//!
//! `cargo bench --bench decide`

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tomlite::annotate::{Annotated, annotation_from_value};
use tomlite::graph::nodes::Registry;
use tomlite::ingest::open;
use tomlite::ingest::record::{IngestOptions, Item, Record};
use tomlite::rules::decide::{Exists, Nodes, decide};
use tomlite::rules::policy::Policy;

/// Registry nodes exist, and memories of the sample's own records.
struct SampleNodes<'a> {
    registry: &'a Registry,
    records: &'a [Record],
}

impl Nodes for SampleNodes<'_> {
    fn exists(&self, node: &str) -> Exists {
        let memory = node
            .strip_prefix("memory:")
            .is_some_and(|id| self.records.iter().any(|r| r.id == id));
        if memory || self.registry.contains(node) {
            Exists::Yes
        } else {
            Exists::No
        }
    }
}

fn validate_and_decide(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample");
    let records: Vec<Record> = open(&root.join("records.jsonl"), &IngestOptions::default())
        .expect("open the sample records")
        .filter_map(|item| match item.expect("read a sample line") {
            Item::Record(r) => Some(*r),
            Item::Reject(_) => None,
        })
        .collect();
    let lines: Vec<(String, String)> = std::fs::read_to_string(root.join("annotations.jsonl"))
        .expect("read the sample annotations")
        .lines()
        // The sample's deliberately truncated line has no record to pair with.
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            Some((v["record_id"].as_str()?.to_string(), l.to_string()))
        })
        .collect();
    let pairs: Vec<(&Record, &str)> = lines
        .iter()
        .filter_map(|(id, line)| {
            records
                .iter()
                .find(|r| &r.id == id)
                .map(|r| (r, line.as_str()))
        })
        .collect();
    let registry = Registry::load(&root.join("nodes.jsonl")).expect("load the sample registry");
    let nodes = SampleNodes {
        registry: &registry,
        records: &records,
    };
    let policy = Policy::default();

    let mut group = c.benchmark_group("validate+decide");
    group.throughput(Throughput::Elements(pairs.len() as u64));
    group.bench_function("sample night (records)", |b| {
        b.iter(|| {
            let mut decided = 0usize;
            for &(record, line) in &pairs {
                let value: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(line).expect("an object");
                let annotated = match annotation_from_value(&value) {
                    Ok(a) => Annotated::Parsed(a),
                    Err(error) => Annotated::Unparseable {
                        raw: line.to_string(),
                        error,
                        read_as: None,
                    },
                };
                let decision = decide(record, &annotated, &policy, &nodes);
                decided += matches!(
                    std::hint::black_box(&decision),
                    tomlite::rules::decide::Decision::Annotated { .. }
                ) as usize;
            }
            decided
        })
    });
    group.finish();
}

// criterion's macro defines an undocumented `pub fn benches`.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, validate_and_decide);
}
criterion_main!(group::benches);
