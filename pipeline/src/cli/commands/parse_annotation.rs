//! `tomlite parse-annotation`: one raw annotator output read by the verdict
//! parser, printed as its canonical annotation and parse class.

use std::io::Read as _;

use anyhow::{Context as _, anyhow};
use tomlite::annotate::annotation_to_json;
use tomlite::annotate::verdict::{self, Verdict};

use crate::cli::args::ParseAnnotationArgs;
use crate::{ExitStatus, Failure};

/// Parses stdin; an `ANOMALY` (no annotation read) exits 5.
pub fn parse_annotation(args: ParseAnnotationArgs) -> Result<(), Failure> {
    let record_text = match &args.text {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --text {}", path.display()))
                .map_err(Failure::config)?,
        ),
        None => None,
    };
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read stdin")
        .map_err(Failure::config)?;
    let raw = String::from_utf8_lossy(&bytes);
    let mut parsed = verdict::parse(&raw);
    if let std::borrow::Cow::Owned(_) = raw {
        parsed
            .notes
            .push("stdin is not valid UTF-8: invalid bytes read as U+FFFD".into());
    }
    let record_id = args.record_id.clone().or_else(|| {
        parsed
            .object
            .as_ref()
            .and_then(|object| object.get("record_id"))
            .and_then(|id| id.as_str())
            .map(str::to_string)
    });
    let (canonical, problems) = canonical_annotation(
        &mut parsed,
        &args,
        record_id.as_deref(),
        record_text.as_deref(),
    );
    if args.annotation_only {
        if let Some(annotation) = &canonical {
            println!("{annotation}");
        }
    } else {
        let out = serde_json::json!({
            "parse_class": parsed.class.as_str(),
            "escape_shape": parsed.shape.map(|shape| shape.as_str()),
            "annotation": canonical,
            "problems": problems,
            "notes": parsed.notes,
            "error": parsed.error,
            "raw_bytes": bytes.len(),
        });
        println!("{out}");
    }
    match parsed.error {
        None => Ok(()),
        Some(error) => Err(Failure {
            status: ExitStatus::Anomaly,
            error: anyhow!("ANOMALY: {error}"),
        }),
    }
}

/// The annotation read, named and anchored in the record text, as its
/// canonical JSON line; with the problems found in it.
fn canonical_annotation(
    parsed: &mut Verdict,
    args: &ParseAnnotationArgs,
    record_id: Option<&str>,
    record_text: Option<&str>,
) -> (Option<serde_json::Value>, Vec<String>) {
    let mut problems = Vec::new();
    let canonical = parsed.annotation.as_mut().map(|annotation| {
        if annotation.annotator.is_none() {
            annotation.annotator = args.annotator.clone();
        }
        if let Some(text) = record_text {
            let anchored = verdict::anchor_quotes(annotation, text);
            if anchored > 0 {
                parsed
                    .notes
                    .push(format!("{anchored} quote(s) anchored in the record text"));
            }
        }
        problems = verdict::problems(annotation, record_text);
        let mut line = annotation_to_json(record_id.unwrap_or_default(), annotation);
        if record_id.is_none() {
            line["record_id"] = serde_json::Value::Null;
        }
        line
    });
    (canonical, problems)
}
