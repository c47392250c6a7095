//! `report.md`: the page's data at a glance, one function per section,
//! with every record-derived value made inert for a terminal and Markdown.

use std::fmt::Write as _;

use serde_json::Value;

use super::inert::{code, items, md, md_line, visible};

/// A JSON number as an integer (0 when absent).
fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// A JSON string, or `fallback` when absent.
fn text_or<'a>(value: &'a Value, fallback: &'a str) -> &'a str {
    value.as_str().unwrap_or(fallback)
}

/// A confidence with two decimals, or `–`.
fn confidence(value: &Value) -> String {
    value
        .as_f64()
        .map_or("–".to_string(), |confidence| format!("{confidence:.2}"))
}

/// One safety record as a table row.
fn safety_row(out: &mut String, record: &Value) {
    let flags = items(&record["flags"])
        .iter()
        .filter_map(Value::as_str)
        .map(|flag| format!("flag {}", md(flag)));
    let mut what: Vec<String> = record["category"].as_str().map(md).into_iter().collect();
    what.extend(flags);
    let quote = match (
        record["quote"].as_str(),
        record["quote_start"].as_u64(),
        record["quote_end"].as_u64(),
    ) {
        (Some(quote), Some(start), Some(end)) => {
            format!(
                "\"{}\" at bytes [{start}, {end})",
                visible(quote, true, true)
            )
        }
        (Some(quote), _, _) => format!("\"{}\"", visible(quote, true, true)),
        _ => "–".into(),
    };
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {quote} |",
        code(text_or(&record["record_id"], "")),
        md(text_or(&record["persona_id"], "")),
        what.join(", "),
        confidence(&record["confidence"])
    );
}

/// Safety records, before anything else (nothing when there are none).
fn safety_section(out: &mut String, data: &Value) {
    let safety = items(&data["safety"]);
    if safety.is_empty() {
        return;
    }
    let total = int(&data["safety_total"]);
    let _ = writeln!(
        out,
        "## Safety records\n\n{total} safety records (detected `mental_health_self_harm` or flagged `safety`): every tag and edge of them is quarantined. Read these first.\n\n\
         | record | persona | category / flag | confidence | quote |\n|---|---|---|---:|---|"
    );
    for record in safety.iter().take(200) {
        safety_row(out, record);
    }
    if safety.len() > 200 {
        let _ = writeln!(out, "\n(the first 200 listed; all of them in report.html)");
    }
    let _ = writeln!(out);
}

/// The annotator, the policy and the duration on one line.
fn run_line(out: &mut String, run: &Value) {
    let policy: String = text_or(&run["policy_sha256"], "")
        .chars()
        .take(12)
        .collect();
    let _ = writeln!(
        out,
        "Annotator {}, policy {}, {:.1} s.\n",
        code(text_or(&run["annotator"], "")),
        code(&policy),
        run["duration_seconds"].as_f64().unwrap_or(0.0)
    );
}

/// The sensitive records by category (nothing when there are none).
fn sensitive_line(out: &mut String, sensitive: &Value) {
    if int(&sensitive["records"]) <= 0 {
        return;
    }
    let categories: Vec<String> = sensitive["by_category"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(category, count)| format!("{} {}", md(category), int(count)))
        .collect();
    let _ = writeln!(
        out,
        "{} sensitive records ({} safety): {} flagged by their producer; detected: {}.\n",
        int(&sensitive["records"]),
        int(&sensitive["safety_records"]),
        int(&sensitive["flagged"]),
        if categories.is_empty() {
            "none".to_string()
        } else {
            categories.join(", ")
        }
    );
}

/// The counts of this run beside the previous run's.
fn outcomes_table(out: &mut String, data: &Value) {
    let counts = &data["counts"];
    let previous = &data["previous"];
    let _ = writeln!(
        out,
        "| outcome | this run | previous run |\n|---|---:|---:|"
    );
    for outcome in [
        "records_in",
        "processed",
        "skipped_unchanged",
        "rejected",
        "abstained",
        "promoted_tags",
        "quarantined_tags",
        "promoted_edges",
        "quarantined_edges",
        "quarantined_annotations",
        "memory_links",
        "unknown_mentions",
        "curator_suppressed",
    ] {
        let before = if previous.is_null() {
            "–".to_string()
        } else {
            int(&previous["counts"][outcome]).to_string()
        };
        let _ = writeln!(out, "| {outcome} | {} | {before} |", int(&counts[outcome]));
    }
}

/// The quarantined items per reason, then the items per persona.
fn reasons_and_personas(out: &mut String, data: &Value) {
    let _ = writeln!(
        out,
        "\n## Quarantine by reason\n\n| reason | items |\n|---|---:|"
    );
    for (reason, count) in data["reasons"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| {} | {} |", md(reason), int(count));
    }
    let _ = writeln!(
        out,
        "\n## By persona\n\n| persona | promoted | quarantined | abstained |\n|---|---:|---:|---:|"
    );
    for persona in items(&data["personas"]) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            md(text_or(&persona["persona_id"], "")),
            int(&persona["promoted"]),
            int(&persona["quarantined"]),
            int(&persona["abstained"])
        );
    }
}

/// One queue item: its heading line, then its quote (or the start of its
/// record's text) as a quoted line.
fn queue_item(out: &mut String, item: &Value, texts: &[Value]) {
    let label = code(text_or(&item["label"], "–"));
    let reasons: Vec<String> = items(&item["reasons"])
        .iter()
        .filter_map(Value::as_str)
        .map(md)
        .collect();
    let target = match (
        item["target_node"].as_str(),
        item["target_mention"].as_str(),
    ) {
        (Some(node), Some(mention)) => format!(" → {} (\"{}\")", code(node), md(mention)),
        (Some(node), None) => format!(" → {}", code(node)),
        (None, Some(mention)) => format!(" → unknown \"{}\"", md(mention)),
        (None, None) => String::new(),
    };
    let mut read_as = match (item["parse_class"].as_str(), item["escape_shape"].as_str()) {
        (Some(class), Some(shape)) => format!(" · read as {} ({})", md(class), md(shape)),
        (Some(class), None) => format!(" · read as {}", md(class)),
        _ => String::new(),
    };
    // The rule that found the record sensitive, so the curator sees why.
    if let Some(rule) = item["rule"].as_str() {
        read_as.push_str(&format!(" · found by {}", code(rule)));
    }
    let _ = writeln!(
        out,
        "- **{}** {} {label} {}{target} — {}{read_as}",
        md(text_or(&item["item_id"], "")),
        md(text_or(&item["item_type"], "")),
        confidence(&item["confidence"]),
        reasons.join(", ")
    );
    let quote = text_or(&item["quote"], "");
    if !quote.is_empty() {
        let _ = writeln!(out, "  > {}", md_line(quote));
    } else {
        let text = texts
            .get(item["text"].as_u64().unwrap_or(0) as usize)
            .and_then(Value::as_str)
            .unwrap_or("");
        let short: String = text.chars().take(160).collect();
        let _ = writeln!(out, "  > {}", md_line(&short));
    }
}

/// The curator's queue: its first 200 items.
fn queue_section(out: &mut String, data: &Value) {
    let total = int(&data["queue_total"]);
    let _ = writeln!(
        out,
        "\n## Queue ({total} items; the first 200 below, all of them in report.html)\n"
    );
    let texts = items(&data["texts"]);
    for item in items(&data["queue"]).iter().take(200) {
        queue_item(out, item, texts);
    }
}

/// The records whose annotation needed rescue (nothing when none did).
fn recovered_table(out: &mut String, recovered: &[Value]) {
    if recovered.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nRecords whose annotation needed rescue ({} listed; every table row says how its record was read in `parse_class` and `escape_shape`):\n\n\
         | record | persona | parse class | escape shape | promoted | quarantined | abstained |\n\
         |---|---|---|---|---:|---:|---:|",
        recovered.len().min(200)
    );
    for record in recovered.iter().take(200) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            md(text_or(&record["record_id"], "")),
            md(text_or(&record["persona_id"], "")),
            md(text_or(&record["parse_class"], "")),
            md(text_or(&record["escape_shape"], "–")),
            int(&record["promoted"]),
            int(&record["quarantined"]),
            int(&record["abstained"])
        );
    }
}

/// Raw annotation lines by parse class and escape shape, and the records
/// that needed rescue (nothing without raw annotations).
fn parse_classes_section(out: &mut String, data: &Value) {
    let Some(classes) = data["parse_classes"].as_object() else {
        return;
    };
    let _ = writeln!(
        out,
        "\n## Raw annotations by parse class\n\n| parse class | lines |\n|---|---:|"
    );
    for (class, lines) in classes {
        let _ = writeln!(out, "| {} | {} |", md(class), int(lines));
    }
    for (shape, lines) in data["escape_shapes"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| ESCAPE-RECOVERY: {} | {} |", md(shape), int(lines));
    }
    recovered_table(out, items(&data["recovered"]));
}

/// Failed and poison records (nothing when there are none).
fn failed_and_poison_section(out: &mut String, data: &Value) {
    let failed = items(&data["failed"]);
    let poison = items(&data["poison"]);
    if failed.is_empty() && poison.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n## Failed and poison records\n");
    for record in poison {
        let _ = writeln!(
            out,
            "- {} ({}:{}): poison, annotation failed in {} runs of this content (last: run {}); skipped until the record or the annotator changes",
            code(text_or(&record["record_id"], "")),
            md(text_or(&record["source"], "")),
            record["line"],
            record["failures"],
            md(text_or(&record["last_failed_run"], ""))
        );
    }
    for record in failed {
        let _ = writeln!(
            out,
            "- {} ({}:{}): failed (run {} of {}): {}",
            code(text_or(&record["record_id"], "")),
            md(text_or(&record["source"], "")),
            record["line"],
            record["failures"],
            tomlite_staging::retry::POISON_AFTER,
            md(text_or(&record["error"], ""))
        );
    }
}

/// The same run at a glance in Markdown.
pub fn markdown(data: &Value) -> String {
    let mut out = String::new();
    let run = &data["run"];
    let _ = writeln!(out, "# tomlite run {}\n", md(text_or(&run["run_id"], "")));
    safety_section(&mut out, data);
    run_line(&mut out, run);
    sensitive_line(&mut out, &data["sensitive"]);
    outcomes_table(&mut out, data);
    reasons_and_personas(&mut out, data);
    super::agreement::markdown_section(&mut out, data);
    queue_section(&mut out, data);
    parse_classes_section(&mut out, data);
    let _ = writeln!(
        out,
        "\n{} abstained, {} rejected: see report.html.",
        int(&data["abstained_total"]),
        int(&data["rejects_total"])
    );
    failed_and_poison_section(&mut out, data);
    out
}
