//! The human output of the commands: the one-screen run summary, and the
//! lines of curate, verify, contract lint, annotate, train and eval.

use std::path::Path;

use serde_json::Value;
use tomlite::annotate::classifier::Classifier;
use tomlite::curate::ApplyReport;
use tomlite::run::{RunSummary, StopCondition};
use tomlite::stage::verify::Verification;
use tomlite_contract::{Finding, Severity};

/// The summary of a committed run (`run`, `merge`).
pub fn print_run_summary(summary: &RunSummary) {
    print_records(summary);
    print_tags_and_edges(summary);
    print_annotations(summary);
    print_left_over(summary);
    print_recovered(summary);
    println!("  run dir     {}", summary.run_dir.display());
}

/// The header and the records read.
fn print_records(summary: &RunSummary) {
    let counts = &summary.counts;
    println!(
        "tomlite run {}: committed{}",
        summary.run_id,
        match summary.stop_condition {
            StopCondition::Deadline => " (partial: time budget reached)",
            StopCondition::InputExhausted => "",
        }
    );
    println!(
        "  records     {} in: {} processed, {} skipped (unchanged), {} rejected",
        counts.records_in, counts.processed, counts.skipped_unchanged, counts.rejected
    );
    if counts.processed == 0 && counts.skipped_unchanged > 0 {
        println!(
            "              nothing new: every record is unchanged since run {}",
            summary.skipped_from.join(", ")
        );
    }
}

/// Tags, edges and sensitive records.
fn print_tags_and_edges(summary: &RunSummary) {
    let counts = &summary.counts;
    println!(
        "  tags        {} promoted, {} quarantined; {} records abstained",
        counts.promoted_tags, counts.quarantined_tags, counts.abstained
    );
    println!(
        "  edges       {} promoted, {} quarantined; {} to an earlier memory, {} naming someone not in the registry",
        counts.promoted_edges,
        counts.quarantined_edges,
        counts.memory_links,
        counts.unknown_mentions
    );
    let sensitive = &summary.sensitive;
    if sensitive.records > 0 {
        let detected: Vec<String> = sensitive
            .by_category
            .iter()
            .map(|(category, records)| format!("{category} {records}"))
            .collect();
        println!(
            "  sensitive   {} sensitive records ({} safety): {} flagged by their producer; detected: {}",
            sensitive.records,
            sensitive.safety_records,
            sensitive.flagged,
            if detected.is_empty() {
                "none".to_string()
            } else {
                detected.join(", ")
            }
        );
    }
}

/// Unreadable annotations, unmatched annotation lines and the quarantine
/// reasons.
fn print_annotations(summary: &RunSummary) {
    let counts = &summary.counts;
    if counts.quarantined_annotations > 0 {
        println!(
            "  annotations {} unreadable, quarantined whole",
            counts.quarantined_annotations
        );
    }
    if counts.annotation_rejects > 0 {
        println!(
            "  annotations {} lines match no record (see rejects)",
            counts.annotation_rejects
        );
    }
    if !summary.reasons.is_empty() {
        println!("  quarantine reasons (items can carry several):");
        let width = summary.reasons.keys().map(String::len).max().unwrap_or(0);
        for (reason, items) in &summary.reasons {
            println!("    {reason:width$}  {items}");
        }
    }
}

/// Failed, deferred and other shards' records, and retried I/O errors.
fn print_left_over(summary: &RunSummary) {
    let counts = &summary.counts;
    if counts.failed > 0 || counts.poison_skipped > 0 {
        println!(
            "  failed      {} records failed to annotate (retried next run), {} skipped as poison (see rejects)",
            counts.failed, counts.poison_skipped
        );
    }
    if counts.deferred > 0 {
        println!(
            "  deferred    {} records read but left for the next run (time budget)",
            counts.deferred
        );
    }
    if counts.other_shards > 0 {
        println!(
            "  shards      {} records belong to other shards",
            counts.other_shards
        );
    }
    if summary.retries_used > 0 {
        println!(
            "  retries     {} transient I/O errors retried",
            summary.retries_used
        );
    }
}

/// Leftovers of an interrupted run removed, and entries left alone.
fn print_recovered(summary: &RunSummary) {
    let left_alone = summary
        .recovered
        .iter()
        .filter(|line| line.starts_with(tomlite_staging::LEFT_ALONE))
        .count();
    let kept: Vec<&String> = summary
        .recovered
        .iter()
        .filter(|line| line.starts_with(tomlite_staging::KEPT_EVENTS))
        .collect();
    if summary.recovered.len() > left_alone + kept.len() {
        println!(
            "  recovered   removed {} leftovers of an interrupted run",
            summary.recovered.len() - left_alone - kept.len()
        );
    }
    for line in kept {
        println!("  recovered   {line}");
    }
    if left_alone > 0 {
        println!(
            "  left alone  {left_alone} entries of runs/ this program did not write (see the receipt's recovered)"
        );
    }
}

/// `tomlite curate apply`'s counts; lines not applied go to stderr.
pub fn print_curate_apply(decisions: &Path, report: &ApplyReport) {
    println!(
        "tomlite curate apply {}: {} lines: {} new, {} updated, {} already applied, {} not applied",
        decisions.display(),
        report.lines,
        report.new,
        report.updated,
        report.unchanged,
        report.errors.len()
    );
    for error in &report.errors {
        eprintln!("tomlite: {}: {error}", decisions.display());
    }
    if let Some(path) = &report.written {
        println!("  curated     {}", path.display());
    }
}

/// `tomlite curate status`: pending, applied and decided items.
pub fn print_curate_status(staging: &Path, status: &Value) {
    println!("tomlite curate status {}", staging.display());
    println!(
        "  pending     {} items (queued by the run that last processed their record, no decision yet)",
        status["pending"]
    );
    for (reason, items) in status["pending_by_reason"]
        .as_object()
        .into_iter()
        .flatten()
    {
        println!("    {reason:32} {items}");
    }
    println!("  applied     {} decisions", status["applied"]);
    for (decision, items) in status["applied_by_decision"]
        .as_object()
        .into_iter()
        .flatten()
    {
        println!("    {decision:32} {items}");
    }
    if let Some(decided) = status.get("decisions_file") {
        println!(
            "  decided     {} lines in {}, {} not applied yet",
            decided["lines"], decided["path"], decided["decided_not_applied"]
        );
    }
    print_agreement(&status["agreement"]);
}

/// The curator's agreement with each head, per confidence bin: the
/// user's own reliability diagram, and whether each threshold holds.
fn print_agreement(agreement: &Value) {
    let Some(heads) = agreement.as_object() else {
        return;
    };
    println!(
        "  agreement   how often the curator agreed with the model, by its confidence (one-by-one decisions; bulk apart)"
    );
    for (head, a) in heads {
        let bins: Vec<String> = a["bins"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["decided"].as_u64().unwrap_or(0) > 0)
            .map(|b| {
                format!(
                    "{} {}/{}",
                    b["bin"].as_str().unwrap_or(""),
                    b["agreed"],
                    b["decided"]
                )
            })
            .collect();
        let at = &a["at_or_above_threshold"];
        let verdict = match a["threshold_holds"].as_bool() {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "no decisions yet",
        };
        println!(
            "    {head:10} at >= {}: {}/{} agreed, the threshold {verdict}; bins: {}; bulk {}/{}",
            a["threshold"],
            at["agreed"],
            at["decided"],
            if bins.is_empty() {
                "none".to_string()
            } else {
                bins.join(", ")
            },
            a["bulk"]["agreed"],
            a["bulk"]["decided"],
        );
    }
}

/// `tomlite verify`: runs that match, differences, what was not checked.
pub fn print_verification(verification: &Verification) {
    for run in &verification.runs {
        if run.differences.is_empty() {
            println!("ok      {} ({} files)", run.dir.display(), run.files);
        }
    }
    for difference in verification.all_differences() {
        println!("DIFFERS {difference}");
    }
    for skipped in &verification.not_checked {
        println!("skipped {skipped}");
    }
}

/// `tomlite contract lint`: one line per finding, then the counts.
pub fn print_lint(files: usize, findings: &[Finding], errors: usize, warnings: usize) {
    for finding in findings {
        let severity = match finding.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        println!(
            "{}: {severity}[{}] {}: {}",
            finding.file,
            finding.rule.id(),
            finding.path,
            finding.message
        );
    }
    println!("tomlite contract lint: {files} files, {errors} errors, {warnings} warnings");
}

/// What `tomlite annotate` counts as it goes: records annotated and input
/// lines rejected (its throughput line prints them).
#[derive(Default)]
pub struct AnnotateCounts {
    /// Records annotated.
    pub records: u64,
    /// Input lines rejected.
    pub rejected: u64,
}

/// `tomlite annotate`'s throughput line, on stderr.
pub fn print_annotate_stats(counts: &AnnotateCounts, seconds: f64, classifier: &Classifier) {
    let stats = &classifier.stats;
    eprintln!(
        "tomlite annotate: {} records ({} rejected) in {seconds:.1}s: {:.1} records/s, {:.0} tokens/s; {} texts encoded ({} reused in their batch, {} from earlier batches), {} tokens + {} padding, {} truncated to the encoder limit; kernels {}",
        counts.records,
        counts.rejected,
        counts.records as f64 / seconds.max(1e-9),
        stats.tokens as f64 / seconds.max(1e-9),
        stats.texts_encoded,
        stats.texts_deduplicated,
        stats.texts_cached,
        stats.tokens,
        stats.padded_tokens,
        stats.truncated_texts,
        classifier.kernels()
    );
}

/// The per-operation wall-clock times of `TOMLITE_PROFILE=1` runs, on stderr.
pub fn print_profile(total: f64) {
    let ops = tomlite_models::profile::totals();
    let encoder: f64 = ops.iter().map(|(_, secs, _)| secs).sum();
    eprintln!("tomlite profile (wall-clock seconds per operation):");
    for (op, secs, calls) in &ops {
        eprintln!(
            "  {:<36} {secs:>8.3} s {:>5.1} %  {calls:>6} calls",
            op.name(),
            100.0 * secs / total.max(1e-9)
        );
    }
    eprintln!(
        "  {:<36} {:>8.3} s {:>5.1} %",
        "rest (heads, quotes, edges, I/O)",
        total - encoder,
        100.0 * (total - encoder) / total.max(1e-9)
    );
    eprintln!("  {:<36} {total:>8.3} s", "total");
}

/// `epoch 2/4 [#######.......] step 130/480 loss 1.234 (epoch 1.301) 41.0 ex/s ETA 12m05s`
pub fn step_line(step: &tomlite_models::finetune::Progress) -> String {
    const WIDTH: usize = 24;
    let filled = (step.step * WIDTH)
        .checked_div(step.steps)
        .unwrap_or(0)
        .min(WIDTH);
    let eta = step.eta.as_secs();
    format!(
        "epoch {}/{} [{}{}] step {}/{} loss {:.4} (epoch {:.4}) {:.1} ex/s ETA {}m{:02}s",
        step.epoch,
        step.epochs,
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        step.step,
        step.steps,
        step.loss,
        step.epoch_loss,
        step.examples_per_s,
        eta / 60,
        eta % 60
    )
}

/// `tomlite eval`: each evaluated set's measures.
pub fn print_eval(sets: &[Value]) {
    for set in sets {
        if let Some(sensitivity) = set.get("sensitivity") {
            print_sensitivity(sensitivity);
            continue;
        }
        println!(
            "== {} ({} records{})",
            set["data"].as_str().unwrap_or(""),
            set["records"]
                .as_u64()
                .map_or("GoEmotions".to_string(), |records| records.to_string()),
            if set["split"] == "dev" {
                ", dev split"
            } else {
                ""
            }
        );
        for head in ["tom_kind", "affect", "intensity"] {
            print_head(head, &set[head]);
        }
        print_tags_and_policy(set);
        if let Some(detected) = set["sensitive_detected"].as_u64() {
            println!("sensitive  {detected} records detected (their tags and edges quarantine)");
        }
        let edges = &set["edges"];
        if !edges.is_null() {
            print_edges(edges);
        }
        print_styles(&set["by_style"]);
    }
}

/// One line per style of the records: primary kind right (strict and by
/// the most likely kind), affect and intensity right.
fn print_styles(styles: &Value) {
    let Some(styles) = styles.as_object().filter(|s| !s.is_empty()) else {
        return;
    };
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.3}"));
    println!("by style   records  primary right (most likely kind)  affect  intensity");
    for (style, m) in styles {
        println!(
            "  {style:24} {:>5}  {} ({})  {}  {}",
            m["records"].as_u64().unwrap_or(0),
            f(&m["primary_right"]),
            f(&m["primary_right_argmax"]),
            f(&m["affect_right"]),
            f(&m["intensity_right"]),
        );
    }
}

/// One head's macro-F1, calibration and per-label measures.
fn print_head(head: &str, measures: &Value) {
    if measures.is_null() {
        return;
    }
    println!(
        "{head:10} macro-F1 {:.3}  ECE before {:.3} after {:.3}",
        measures["macro_f1"].as_f64().unwrap_or(0.0),
        measures["ece_before"].as_f64().unwrap_or(0.0),
        measures["ece_after"].as_f64().unwrap_or(0.0)
    );
    for label in measures["per_label"].as_array().into_iter().flatten() {
        println!(
            "    {:18} P {:.3}  R {:.3}  F1 {:.3}  n {}",
            label["label"].as_str().unwrap_or(""),
            label["precision"].as_f64().unwrap_or(0.0),
            label["recall"].as_f64().unwrap_or(0.0),
            label["f1"].as_f64().unwrap_or(0.0),
            label["support"]
        );
    }
}

/// The emitted tags' precision and what the policy would promote.
fn print_tags_and_policy(set: &Value) {
    let tags = &set["tags"];
    if !tags.is_null() {
        println!(
            "tags       {} emitted  precision {}  ECE of their confidence {}  at >= 0.8: {} tags, precision {}",
            tags["n"],
            tags["precision"],
            tags["ece"],
            tags["at_or_above_0_8"]["n"],
            tags["at_or_above_0_8"]["precision"]
        );
    }
    let policy = &set["policy"];
    if !policy.is_null() {
        println!(
            "policy     promoted tags {}  precision {}  coverage {}  on no-signal records {}  quote overlaps gold {}",
            policy["promoted_tags"],
            policy["promoted_tag_precision"],
            policy["coverage"],
            policy["promoted_on_no_signal_records"],
            policy["quote_overlaps_gold"]
        );
        println!(
            "           promoted right on affect {}  intensity {}  all three {}",
            policy["promoted_affect_precision"],
            policy["promoted_intensity_precision"],
            policy["promoted_all_three_precision"]
        );
        let gates = &policy["gates"];
        println!(
            "gates      of the signal records: best kind {}  affect {}  intensity {}  all three {}",
            gates["best_kind"], gates["affect"], gates["intensity"], gates["all_three"]
        );
    }
}

/// Registry, unknown-person and memory-link edges.
fn print_edges(edges: &Value) {
    let (registry, unknown, memory) = (&edges["registry"], &edges["unknown"], &edges["memory"]);
    println!(
        "edges      registry: {} gold mentions, {} proposed (precision {}, recall {}), {} promoted (edge precision {}, edge recall {}), ECE of confidence {}",
        registry["gold_mentions"],
        registry["proposed"],
        registry["proposed_precision"],
        registry["proposed_recall"],
        registry["promoted"],
        registry["edge_precision"],
        registry["edge_recall"],
        registry["confidence_ece"]
    );
    println!(
        "           unknown: {} gold, recall {}, {} unknown edges, false unknowns {} ({} per 100 records)",
        unknown["gold_unknown_mentions"],
        unknown["unknown_recall"],
        unknown["unknown_edges"],
        unknown["false_unknowns"],
        unknown["false_unknowns_per_100_records"]
    );
    println!(
        "           memory links: {} gold, {} proposed (precision {}, recall {}), {} promoted (precision {})",
        memory["gold_links"],
        memory["proposed"],
        memory["proposed_precision"],
        memory["recall"],
        memory["promoted"],
        memory["promoted_precision"]
    );
    println!(
        "           records over the edge limit: {}",
        edges["records_over_the_edge_limit"]
    );
}

/// `tomlite eval --sensitivity`'s lines.
fn print_sensitivity(measures: &Value) {
    println!(
        "== {} ({} records{}): sensitive content at P >= {}",
        measures["data"].as_str().unwrap_or(""),
        measures["records"],
        if measures["split"] == "dev" {
            ", dev split"
        } else {
            ""
        },
        measures["threshold"]
    );
    println!(
        "sensitive  recall {} of {}  controls flagged {} of {} ({})  ECE {}  category right {}  quote on the gold line {}",
        measures["recall"],
        measures["sensitive"],
        measures["control_false_positives"],
        measures["controls"],
        measures["control_false_positive_rate"],
        measures["ece"],
        measures["category_right_when_detected"],
        measures["quote_overlaps_gold_line"]
    );
    for (category, measure) in measures["per_category"].as_object().into_iter().flatten() {
        println!(
            "    {category:30} recall {}  n {}",
            measure["recall"], measure["support"]
        );
    }
    let trade = &measures["trade_off"];
    if trade.is_null() {
        return;
    }
    println!(
        "trade-off  AUC {}; at most {} of controls flagged: P >= {} finds {}",
        trade["auc"],
        trade["recall_at_controls_flagged_at_most"]["controls"],
        trade["recall_at_controls_flagged_at_most"]["at"]["threshold"],
        trade["recall_at_controls_flagged_at_most"]["at"]["recall"],
    );
    for row in trade["at_thresholds"].as_array().into_iter().flatten() {
        println!(
            "    P >= {:<5} recall {}  self-harm {}  controls flagged {}",
            row["threshold"],
            row["recall"],
            row["mental_health_self_harm_recall"],
            row["control_false_positive_rate"]
        );
    }
}
