//! What becomes of a record's decided items: promoted, queued for the
//! curator, or dropped because a curator already decided them.

use crate::annotate::read_as::ReadAs;
use crate::ingest::record::Record;
use crate::rules::decide::{EdgeItem, TagItem};
use crate::run::error::RunError;
use crate::run::open_run::OpenRun;
use crate::run::stage_rows::parse_cells;
use crate::stage::receipt::MemoryLink;
use crate::stage::tables::ParseCells;

impl OpenRun<'_> {
    /// Writes a record's decided items; returns its outcome for the state.
    pub(super) fn stage(
        &mut self,
        rec: &Record,
        tags: &[TagItem],
        edges: &[EdgeItem],
        best: Option<&(String, f64)>,
        read_as: Option<ReadAs>,
    ) -> Result<&'static str, RunError> {
        let parse = parse_cells(read_as);
        if tags.is_empty() {
            self.abstain(rec, best, "no_tags", read_as)?;
        }
        let mut staged = StagedItems::default();
        for tag in tags {
            staged.add(self.stage_tag(rec, tag, parse)?);
        }
        for edge in edges {
            self.count_edge(rec, edge);
            staged.add(self.stage_edge(rec, edge, parse)?);
        }
        Ok(staged.outcome(tags.is_empty()))
    }

    /// Promotes, queues or (when a curator already decided it) drops a tag.
    fn stage_tag(
        &mut self,
        rec: &Record,
        tag: &TagItem,
        parse: ParseCells<'_>,
    ) -> Result<ItemFate, RunError> {
        if tag.reasons.is_empty() {
            self.counts.promoted_tags += 1;
            self.tables.promoted_tag(rec, tag, parse)?;
            return Ok(ItemFate::Promoted);
        }
        let identity = crate::curate::identity("tag", tag.tom_kind.as_deref(), None);
        if self.curated(rec, &identity) {
            self.counts.curator_suppressed += 1;
            return Ok(ItemFate::Suppressed);
        }
        self.counts.quarantined_tags += 1;
        self.count_reasons(&tag.reasons);
        self.tables.quarantined_tag(rec, tag, parse)?;
        Ok(ItemFate::Quarantined)
    }

    /// Promotes, queues or (when a curator already decided it) drops an edge.
    fn stage_edge(
        &mut self,
        rec: &Record,
        edge: &EdgeItem,
        parse: ParseCells<'_>,
    ) -> Result<ItemFate, RunError> {
        if edge.reasons.is_empty() {
            self.counts.promoted_edges += 1;
            self.tables.promoted_edge(rec, edge, parse)?;
            return Ok(ItemFate::Promoted);
        }
        let identity = crate::curate::identity("edge", None, Some(&edge.edge_key));
        if self.curated(rec, &identity) {
            self.counts.curator_suppressed += 1;
            return Ok(ItemFate::Suppressed);
        }
        self.counts.quarantined_edges += 1;
        self.count_reasons(&edge.reasons);
        self.tables.quarantined_edge(rec, edge, parse)?;
        Ok(ItemFate::Quarantined)
    }

    /// Counts an edge's unknown mention and memory link; lists the first
    /// 100 memory links for the receipt.
    fn count_edge(&mut self, rec: &Record, edge: &EdgeItem) {
        if edge.target_node.is_none() && edge.target_mention.is_some() {
            self.counts.unknown_mentions += 1;
        }
        let Some(memory) = edge
            .target_node
            .as_deref()
            .filter(|target| target.starts_with("memory:"))
        else {
            return;
        };
        self.counts.memory_links += 1;
        if self.memory_links.len() < 100 {
            self.memory_links.push(MemoryLink {
                record_id: rec.id.clone(),
                source_node: edge.source_node.clone(),
                relation: edge.relation.clone(),
                target_node: memory.to_string(),
                confidence: edge.confidence,
                edge_key: edge.edge_key.clone(),
                source_quote: edge.quote.text.clone(),
                outcome: if edge.reasons.is_empty() {
                    "promoted"
                } else {
                    "quarantined"
                }
                .into(),
                reasons: edge
                    .reasons
                    .iter()
                    .map(|r| r.as_str().to_string())
                    .collect(),
            });
        }
    }
}

/// What became of one decided item.
enum ItemFate {
    Promoted,
    Quarantined,
    /// A curator already decided it for this unchanged record.
    Suppressed,
}

/// How many of a record's items were promoted and quarantined.
#[derive(Default)]
struct StagedItems {
    promoted: u64,
    quarantined: u64,
}

impl StagedItems {
    fn add(&mut self, fate: ItemFate) {
        match fate {
            ItemFate::Promoted => self.promoted += 1,
            ItemFate::Quarantined => self.quarantined += 1,
            ItemFate::Suppressed => {}
        }
    }

    /// The record's outcome for the state.
    fn outcome(&self, no_tags: bool) -> &'static str {
        match (no_tags, self.promoted, self.quarantined) {
            (true, 0, 0) => "abstained",
            (_, _, 0) => "promoted",
            (_, 0, _) => "quarantined",
            _ => "mixed",
        }
    }
}
