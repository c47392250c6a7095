//! `tomlite annotate`: the local classifier's annotations of the inputs,
//! written as docs/design.md's annotation JSONL.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use anyhow::Context as _;
use tomlite::annotate::annotation_to_json;
use tomlite::annotate::classifier::{Classifier, RECORDS_PER_PASS};
use tomlite::graph::nodes::Registry;
use tomlite::ingest::record::{Item, Record};

use super::load_classifier;
use crate::cli::settings::AnnotateSettings;
use crate::cli::summary::{self, AnnotateCounts};
use crate::{ExitStatus, Failure};

/// An error of the annotation itself: exit 1.
fn failed(error: anyhow::Error) -> Failure {
    Failure {
        status: ExitStatus::Failed,
        error,
    }
}

/// Annotates every input into a temporary file, renamed over `--out` once
/// complete; prints throughput on stderr.
pub fn annotate(settings: AnnotateSettings) -> Result<(), Failure> {
    let mut classifier = load_classifier(&settings.model, &settings.policy)?;
    if let Some(path) = &settings.nodes {
        classifier.set_registry(&Registry::load(path).map_err(Failure::config)?);
    }
    let tmp = settings.out.with_extension("jsonl.tmp");
    let file = File::create(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))
        .map_err(failed)?;
    let mut out = BufWriter::new(file);
    let mut counts = AnnotateCounts::default();
    let started = std::time::Instant::now();
    for input in &settings.inputs {
        annotate_input(input, &settings, &mut classifier, &mut out, &mut counts)?;
    }
    out.flush()
        .with_context(|| format!("cannot write {}", tmp.display()))
        .map_err(failed)?;
    drop(out);
    std::fs::rename(&tmp, &settings.out)
        .with_context(|| format!("cannot write {}", settings.out.display()))
        .map_err(failed)?;
    let seconds = started.elapsed().as_secs_f64();
    summary::print_annotate_stats(&counts, seconds, &classifier);
    if tomlite_models::profile::enabled() {
        summary::print_profile(seconds);
    }
    Ok(())
}

/// Annotates one input's records in passes of [`RECORDS_PER_PASS`]; its
/// rejected lines are reported on stderr.
fn annotate_input(
    input: &Path,
    settings: &AnnotateSettings,
    classifier: &mut Classifier,
    out: &mut BufWriter<File>,
    counts: &mut AnnotateCounts,
) -> Result<(), Failure> {
    let items =
        tomlite::ingest::open(input, &settings.ingest).map_err(|error| failed(error.into()))?;
    let mut batch: Vec<Record> = Vec::new();
    for item in items {
        match item.map_err(|error| failed(error.into()))? {
            Item::Record(record) => {
                counts.records += 1;
                batch.push(*record);
                if batch.len() == RECORDS_PER_PASS {
                    write_batch(classifier, &mut batch, out).map_err(failed)?;
                }
            }
            Item::Reject(reject) => {
                counts.rejected += 1;
                eprintln!(
                    "tomlite: skipped {}:{} ({}): {}: {}",
                    reject.source,
                    reject.line,
                    reject.record_id.as_deref().unwrap_or("?"),
                    reject.field.as_deref().unwrap_or("line"),
                    reject.error
                );
            }
        }
    }
    write_batch(classifier, &mut batch, out).map_err(failed)
}

/// Scores the batch in one pass, writes one annotation line per record and
/// empties the batch.
fn write_batch(
    classifier: &mut Classifier,
    batch: &mut Vec<Record>,
    out: &mut BufWriter<File>,
) -> anyhow::Result<()> {
    let texts: Vec<&str> = batch.iter().map(|record| record.text.as_str()).collect();
    let scores = classifier.score(&texts)?;
    for (record, record_scores) in batch.iter().zip(&scores) {
        let annotation = classifier.annotation(record, record_scores);
        serde_json::to_writer(&mut *out, &annotation_to_json(&record.id, &annotation))?;
        out.write_all(b"\n")?;
    }
    batch.clear();
    Ok(())
}
