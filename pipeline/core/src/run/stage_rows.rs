//! A run's staged tables and the rows it writes to them: one method per
//! kind of row, each filling the table's row struct from a record and its
//! decided items.

use crate::annotate::Quote;
use crate::annotate::read_as::ReadAs;
use crate::ingest::record::{Record, Reject};
use crate::rules::decide::{EdgeItem, SensitiveRecord, TagItem};
use crate::rules::reason::Reason;
use crate::run::mask::{Masks, Secrets};
use crate::stage::tables::{
    Abstained, AbstainedRow, ParseCells, PromotedEdgeRow, PromotedEdges, PromotedTagRow,
    PromotedTags, Provenance, Quarantine, QuarantineRow, QueuedAffect, QueuedItem, QuoteCells,
    RejectRow, Rejects, Sensitive, SensitiveRow, Table,
};
use tomlite_staging::RunDir;

/// The run's six tables and who stages into them.
pub(super) struct StagedTables {
    promoted_tags: Table<PromotedTags>,
    promoted_edges: Table<PromotedEdges>,
    quarantine: Table<Quarantine>,
    abstained: Table<Abstained>,
    sensitive: Table<Sensitive>,
    rejects: Table<Rejects>,
    annotator: String,
    run_id: String,
    /// The secrets of the record being staged, masked in its rows.
    masks: Masks,
}

/// Which input a reject row came from (the `rejects.input` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RejectedInput {
    /// A record line, row or file.
    Records,
    /// An annotation line.
    Annotations,
    /// A record whose annotation failed in this run.
    AnnotationFailed,
    /// A record skipped as poison.
    Poison,
}

impl RejectedInput {
    fn as_str(self) -> &'static str {
        match self {
            Self::Records => "records",
            Self::Annotations => "annotations",
            Self::AnnotationFailed => "annotation_failed",
            Self::Poison => "poison",
        }
    }
}

/// The `parse_class` and `escape_shape` cells of a record's rows.
pub(super) fn parse_cells(read_as: Option<ReadAs>) -> ParseCells<'static> {
    ParseCells {
        parse_class: read_as.map(|r| r.class.as_str()),
        escape_shape: read_as.and_then(|r| r.shape).map(|s| s.as_str()),
    }
}

/// A promoted item's value: the seed's reasons, which every policy keeps,
/// quarantine an item without it.
fn promoted<T>(value: Option<T>, what: &str) -> T {
    value.unwrap_or_else(|| panic!("a promoted item has its {what}"))
}

/// A quote's cells, each possibly null; `text`: the quote's text as
/// staged (masked).
fn quote_cells<'a>(quote: &Quote, text: Option<&'a str>) -> QuoteCells<'a> {
    QuoteCells {
        source_quote: text,
        quote_start: quote.start,
        quote_end: quote.end,
    }
}

impl StagedTables {
    /// Opens the six tables in the run directory.
    pub(super) fn create(
        run: &mut RunDir,
        annotator: &str,
        run_id: &str,
    ) -> Result<Self, tomlite_staging::Error> {
        Ok(Self {
            promoted_tags: Table::create(run)?,
            promoted_edges: Table::create(run)?,
            quarantine: Table::create(run)?,
            abstained: Table::create(run)?,
            sensitive: Table::create(run)?,
            rejects: Table::create(run)?,
            annotator: annotator.to_string(),
            run_id: run_id.to_string(),
            masks: Masks::default(),
        })
    }

    /// Closes every table, in the staged order; returns (name, file) pairs.
    pub(super) fn close(
        self,
    ) -> Result<Vec<(&'static str, std::path::PathBuf)>, tomlite_staging::Error> {
        Ok(vec![
            (self.promoted_tags.name(), self.promoted_tags.close()?),
            (self.promoted_edges.name(), self.promoted_edges.close()?),
            (self.quarantine.name(), self.quarantine.close()?),
            (self.abstained.name(), self.abstained.close()?),
            (self.sensitive.name(), self.sensitive.close()?),
            (self.rejects.name(), self.rejects.close()?),
        ])
    }

    /// A rejected line, row or file, or a failed or poison record.
    pub(super) fn reject(
        &mut self,
        reject: &Reject,
        input: RejectedInput,
    ) -> Result<(), tomlite_staging::Error> {
        self.rejects.push(&RejectRow {
            source: &reject.source,
            line: reject.line,
            record_id: reject.record_id.as_deref(),
            field: reject.field.as_deref(),
            error: &reject.error,
            input: input.as_str(),
        })
    }

    /// A record whose annotation failed, or that was skipped as poison.
    pub(super) fn failed_record(
        &mut self,
        record: &Record,
        input: RejectedInput,
        message: &str,
    ) -> Result<(), tomlite_staging::Error> {
        self.rejects.push(&RejectRow {
            source: &record.origin.source,
            line: record.origin.line,
            record_id: Some(&record.id),
            field: Some("annotation"),
            error: message,
            input: input.as_str(),
        })
    }

    /// A record with no tag; `best`: the best tom_kind and its confidence.
    pub(super) fn abstained(
        &mut self,
        record: &Record,
        best: Option<&(String, f64)>,
        why: &str,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        self.abstained.push(&AbstainedRow {
            record_id: &record.id,
            persona_id: &record.persona_id,
            source_path: &record.source_path,
            best_tom_kind: best.map(|(kind, _)| kind.as_str()),
            best_confidence: best.map(|(_, confidence)| *confidence),
            why,
            provenance: Provenance {
                annotator: &self.annotator,
                run_id: &self.run_id,
            },
            parse,
        })
    }

    /// A sensitive record's row.
    pub(super) fn sensitive(
        &mut self,
        record: &Record,
        sensitive: &SensitiveRecord,
    ) -> Result<(), tomlite_staging::Error> {
        let detection = sensitive.detection.as_ref();
        let flags: Vec<&str> = sensitive.flags.iter().map(String::as_str).collect();
        let secrets = self.masks.of(record);
        let quote = detection
            .and_then(|d| d.quote.text.as_deref())
            .map(|q| secrets.other(q));
        let text = secrets.text(&record.text);
        self.sensitive.push(&SensitiveRow {
            record_id: &record.id,
            persona_id: &record.persona_id,
            source_path: &record.source_path,
            record_kind: record.kind.as_str(),
            category: detection.and_then(|d| d.category.as_deref()),
            confidence: detection.and_then(|d| d.confidence),
            detector: detection.and_then(|d| d.detector.as_deref()),
            flags: &flags,
            safety: u64::from(sensitive.safety),
            quote: quote.as_deref(),
            quote_start: detection.and_then(|d| d.quote.start),
            quote_end: detection.and_then(|d| d.quote.end),
            record_text: &text,
            masked: secrets.summary(),
            provenance: Provenance {
                annotator: &self.annotator,
                run_id: &self.run_id,
            },
        })
    }

    /// A promoted tag.
    pub(super) fn promoted_tag(
        &mut self,
        record: &Record,
        tag: &TagItem,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        let quote = self
            .masks
            .of(record)
            .other(promoted(tag.quote.text.as_deref(), "quote"));
        self.promoted_tags.push(&PromotedTagRow {
            record_id: &record.id,
            persona_id: &record.persona_id,
            kind: record.kind.as_str(),
            source_path: &record.source_path,
            created_at: &record.created_at,
            tom_kind: promoted(tag.tom_kind.as_deref(), "tom_kind"),
            tom_kind_confidence: promoted(tag.confidence, "confidence"),
            affect: promoted(tag.affect.as_deref(), "affect"),
            affect_confidence: promoted(tag.affect_confidence, "affect confidence"),
            intensity: promoted(tag.intensity.as_deref(), "intensity"),
            intensity_confidence: promoted(tag.intensity_confidence, "intensity confidence"),
            source_quote: &quote,
            quote_start: promoted(tag.quote.start, "quote start"),
            quote_end: promoted(tag.quote.end, "quote end"),
            provenance: Provenance {
                annotator: &self.annotator,
                run_id: &self.run_id,
            },
            item_id: &tag.item_id,
            parse,
        })
    }

    /// A promoted edge.
    pub(super) fn promoted_edge(
        &mut self,
        record: &Record,
        edge: &EdgeItem,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        let quote = self
            .masks
            .of(record)
            .other(promoted(edge.quote.text.as_deref(), "quote"));
        self.promoted_edges.push(&PromotedEdgeRow {
            edge_key: &edge.edge_key,
            record_id: &record.id,
            persona_id: &record.persona_id,
            source_node: &edge.source_node,
            relation: promoted(edge.relation.as_deref(), "relation"),
            target_node: promoted(edge.target_node.as_deref(), "target node"),
            target_mention: edge.target_mention.as_deref(),
            confidence: promoted(edge.confidence, "confidence"),
            source_quote: &quote,
            quote_start: promoted(edge.quote.start, "quote start"),
            quote_end: promoted(edge.quote.end, "quote end"),
            provenance: Provenance {
                annotator: &self.annotator,
                run_id: &self.run_id,
            },
            item_id: &edge.item_id,
            parse,
        })
    }

    /// A quarantined tag.
    pub(super) fn quarantined_tag(
        &mut self,
        record: &Record,
        tag: &TagItem,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        let reasons = reason_names(&tag.reasons);
        let secrets = self.masks.of(record);
        let detail = masked_detail(secrets, &tag.detail.join("; "));
        let text = secrets.text(&record.text);
        let quote = tag.quote.text.as_deref().map(|q| secrets.other(q));
        let provenance = Provenance {
            annotator: &self.annotator,
            run_id: &self.run_id,
        };
        let row = QuarantineRow {
            label: tag.tom_kind.as_deref(),
            suggested_label: tag.suggested_label.as_deref(),
            confidence: tag.confidence,
            affect: QueuedAffect {
                affect: tag.affect.as_deref(),
                affect_confidence: tag.affect_confidence,
                suggested_affect: tag.suggested_affect.as_deref(),
                intensity: tag.intensity.as_deref(),
                intensity_confidence: tag.intensity_confidence,
                suggested_intensity: tag.suggested_intensity.as_deref(),
            },
            quote: quote_cells(&tag.quote, quote.as_deref()),
            detail: Some(&detail),
            record_text: &text,
            ..queued(record, (&tag.item_id, "tag"), &reasons, parse, provenance)
        };
        self.quarantine.push(&row)
    }

    /// A quarantined edge.
    pub(super) fn quarantined_edge(
        &mut self,
        record: &Record,
        edge: &EdgeItem,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        let reasons = reason_names(&edge.reasons);
        let secrets = self.masks.of(record);
        let detail = masked_detail(secrets, &edge.detail.join("; "));
        let text = secrets.text(&record.text);
        let quote = edge.quote.text.as_deref().map(|q| secrets.other(q));
        let provenance = Provenance {
            annotator: &self.annotator,
            run_id: &self.run_id,
        };
        let row = QuarantineRow {
            label: edge.relation.as_deref(),
            target_node: edge.target_node.as_deref(),
            target_mention: edge.target_mention.as_deref(),
            edge_key: Some(&edge.edge_key),
            suggested_label: edge.suggested_label.as_deref(),
            confidence: edge.confidence,
            quote: quote_cells(&edge.quote, quote.as_deref()),
            detail: Some(&detail),
            record_text: &text,
            ..queued(record, (&edge.item_id, "edge"), &reasons, parse, provenance)
        };
        self.quarantine.push(&row)
    }

    /// An annotation that could not be read, queued whole.
    pub(super) fn unreadable_annotation(
        &mut self,
        record: &Record,
        raw: &str,
        error: &str,
        parse: ParseCells<'_>,
    ) -> Result<(), tomlite_staging::Error> {
        let item_id = format!("{}#annotation", record.id);
        let reasons = [Reason::UnparseableAnnotation.as_str()];
        let secrets = self.masks.of(record);
        let detail = masked_detail(secrets, error);
        let raw = secrets.other(raw);
        let text = secrets.text(&record.text);
        let provenance = Provenance {
            annotator: &self.annotator,
            run_id: &self.run_id,
        };
        let row = QuarantineRow {
            detail: Some(&detail),
            raw_annotation: Some(&raw),
            record_text: &text,
            ..queued(
                record,
                (&item_id, "annotation"),
                &reasons,
                parse,
                provenance,
            )
        };
        self.quarantine.push(&row)
    }
}

/// A queue row of a record's item with every item column empty.
fn queued<'r>(
    record: &'r Record,
    (item_id, item_type): (&'r str, &'r str),
    reasons: &'r [&'r str],
    parse: ParseCells<'r>,
    provenance: Provenance<'r>,
) -> QuarantineRow<'r> {
    QuarantineRow {
        item: QueuedItem {
            item_id,
            item_type,
            record_id: &record.id,
            persona_id: &record.persona_id,
            source_path: &record.source_path,
        },
        label: None,
        target_node: None,
        target_mention: None,
        edge_key: None,
        reasons,
        suggested_label: None,
        confidence: None,
        affect: QueuedAffect::NONE,
        quote: QuoteCells {
            source_quote: None,
            quote_start: None,
            quote_end: None,
        },
        detail: None,
        record_text: &record.text,
        raw_annotation: None,
        provenance,
        record_kind: record.kind.as_str(),
        parse,
    }
}

/// A queued item's detail, masked, and naming what was masked.
fn masked_detail(secrets: &Secrets, detail: &str) -> String {
    let detail = secrets.other(detail);
    match secrets.summary() {
        Some(summary) if detail.is_empty() => format!("masked: {summary}"),
        Some(summary) => format!("{detail}; masked: {summary}"),
        None => detail.into_owned(),
    }
}

/// The reasons' snake_case names.
fn reason_names(reasons: &[Reason]) -> Vec<&'static str> {
    reasons.iter().map(|r| r.as_str()).collect()
}
