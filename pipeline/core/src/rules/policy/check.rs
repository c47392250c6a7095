//! The checks of the effective policy: ranges, fixed values and
//! vocabularies, each failure as (key path, message).

use super::*;

/// A failed check: the key's path and what is wrong with it.
pub(super) fn reject(key: &str, message: String) -> Result<(), (String, String)> {
    Err((key.to_string(), message))
}

impl TomLite {
    /// The seed's rules are on and every label is in the vocabulary;
    /// returns (key path, message).
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        if !self.controlled_vocabulary {
            return reject(
                "tom_lite.controlled_vocabulary",
                "must be true: the vocabulary is closed".into(),
            );
        }
        if self.freeform_tom_tags != "denied" {
            return reject(
                "tom_lite.freeform_tom_tags",
                format!("must be `denied`, found `{}`", self.freeform_tom_tags),
            );
        }
        if !(1..=2).contains(&self.max_tom_kinds_per_memory) {
            return reject(
                "tom_lite.max_tom_kinds_per_memory",
                format!(
                    "{} is outside [1, 2]: the seed allows at most 2 tom_kinds per memory; a policy may lower that, not raise it",
                    self.max_tom_kinds_per_memory
                ),
            );
        }
        if !self.require_source_anchor {
            return reject(
                "tom_lite.require_source_anchor",
                "must be true: every promoted tag and edge is anchored by a verbatim quote of its record (the seed's rule; an item without one is quarantined `source_quote_missing`)".into(),
            );
        }
        if self.max_affect_labels_per_memory != 1 {
            return reject(
                "tom_lite.max_affect_labels_per_memory",
                format!(
                    "must be 1 (one affect per record), found {}",
                    self.max_affect_labels_per_memory
                ),
            );
        }
        self.check_label_lists()
    }

    /// Each label list is non-empty and inside its field's vocabulary.
    pub(super) fn check_label_lists(&self) -> Result<(), (String, String)> {
        for (key, list, field) in [
            ("tom_lite.tom_kind", &self.tom_kind, Field::TomKind),
            ("tom_lite.affect", &self.affect, Field::Affect),
            ("tom_lite.intensity", &self.intensity, Field::Intensity),
        ] {
            if list.is_empty() {
                return reject(key, "must name at least one label".into());
            }
            for (index, label) in list.iter().enumerate() {
                if !field.contains(label) {
                    return reject(
                        &format!("{key}[{index}]"),
                        format!(
                            "`{label}` is not in the ToM-lite {} vocabulary ({})",
                            field.name(),
                            field.labels().join(", ")
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

impl PromotionPolicy {
    /// The seed's promotion rules are on and `quarantine_when` names every
    /// seed reason; returns (key path, message). Confidence ranges are
    /// checked by [`Policy::check`].
    pub(super) fn check_rules(&self) -> Result<(), (String, String)> {
        for (key, required) in [
            (
                "tom_lite_promotion_policy.promote_tags_when.source_quote_required",
                self.promote_tags_when.source_quote_required,
            ),
            (
                "tom_lite_promotion_policy.promote_edges_when.source_quote_required",
                self.promote_edges_when.source_quote_required,
            ),
        ] {
            if !required {
                return reject(
                    key,
                    "must be true: the seed promotes only what a verbatim quote of the record supports (`source_quote_missing` otherwise)".into(),
                );
            }
        }
        self.promote_edges_when.check()?;
        self.check_quarantine_when()
    }

    /// Every listed reason exists and every seed reason is listed.
    pub(super) fn check_quarantine_when(&self) -> Result<(), (String, String)> {
        for (index, listed) in self.quarantine_when.iter().enumerate() {
            if Reason::parse(listed).is_none() {
                return reject(
                    &format!("tom_lite_promotion_policy.quarantine_when[{index}]"),
                    format!(
                        "`{listed}` is not a quarantine reason ({})",
                        Reason::ALL
                            .iter()
                            .map(|reason| reason.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        for reason in Reason::SEED {
            if !self
                .quarantine_when
                .iter()
                .any(|listed| listed == reason.as_str())
            {
                return reject(
                    "tom_lite_promotion_policy.quarantine_when",
                    format!(
                        "must list `{}`: a run never promotes what the seed quarantines",
                        reason.as_str()
                    ),
                );
            }
        }
        Ok(())
    }
}

impl PromoteEdges {
    /// The seed's edge rules are on and the per-record limit is 1 or 2.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        if !self.both_nodes_must_exist {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.both_nodes_must_exist",
                "must be true: an edge is promoted only between registry nodes or memories (`unknown_target_node` otherwise); false would promote edges to nodes nobody registered".into(),
            );
        }
        if !(1..=2).contains(&self.max_edges_per_record) {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.max_edges_per_record",
                format!(
                    "{} is outside [1, 2]: the seed quarantines every edge of a record with more than two candidates (`more_than_two_edge_candidates`); a policy may lower the limit, not raise it",
                    self.max_edges_per_record
                ),
            );
        }
        if !self.deterministic_edge_key_required {
            return reject(
                "tom_lite_promotion_policy.promote_edges_when.deterministic_edge_key_required",
                "must be true: edge keys are always derived from (source, relation, target)".into(),
            );
        }
        Ok(())
    }
}

impl ClassifierPolicy {
    /// The model only suggests, abstains when weak, and is not both required
    /// and forbidden; returns (key path, message). `abstain_below`'s range is
    /// checked by [`Policy::check`].
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        if !self.output_is_advisory {
            return reject(
                "classifier_policy.output_is_advisory",
                "must be true: the model only suggests".into(),
            );
        }
        if !self.optional && !self.local_llm_or_classifier_may_suggest {
            return reject(
                "classifier_policy.optional",
                "cannot be false while local_llm_or_classifier_may_suggest is false: the local classifier would be both required and forbidden".into(),
            );
        }
        if self.weak_classification_action != "abstain" {
            return reject(
                "classifier_policy.weak_classification_action",
                format!(
                    "must be `abstain`, found `{}`",
                    self.weak_classification_action
                ),
            );
        }
        if !self.durable_memory_write_requires_curator_or_project_agent {
            return reject(
                "classifier_policy.durable_memory_write_requires_curator_or_project_agent",
                "must be true: the job only stages, a curator promotes durably".into(),
            );
        }
        Ok(())
    }
}

impl Policy {
    /// Checks ranges, fixed values and vocabularies; returns (key path, message).
    pub fn check(&self) -> Result<(), (String, String)> {
        self.tom_lite.check()?;
        self.check_confidence_minimums()?;
        self.tom_lite_promotion_policy.check_rules()?;
        self.classifier_policy.check()?;
        if self.run.max_text_bytes == 0 || self.run.max_text_bytes > MAX_TEXT_BYTES_LIMIT {
            return reject(
                "run.max_text_bytes",
                format!(
                    "{} is outside 1..={MAX_TEXT_BYTES_LIMIT} (64 MiB): the line cap of JSONL input is six times it, and a larger value would overflow it",
                    self.run.max_text_bytes
                ),
            );
        }
        self.persona_memory_policy.sensitive_content.check()
    }

    /// Every confidence minimum (and `abstain_below`) lies in [0, 1].
    fn check_confidence_minimums(&self) -> Result<(), (String, String)> {
        let tags = &self.tom_lite_promotion_policy.promote_tags_when;
        let edges = &self.tom_lite_promotion_policy.promote_edges_when;
        for (key, minimum) in [
            (
                "tom_lite_promotion_policy.promote_tags_when.tom_kind_confidence_min",
                tags.tom_kind_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.affect_confidence_min",
                tags.affect_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_tags_when.intensity_confidence_min",
                tags.intensity_confidence_min,
            ),
            (
                "tom_lite_promotion_policy.promote_edges_when.edge_confidence_min",
                edges.edge_confidence_min,
            ),
            (
                "classifier_policy.abstain_below",
                self.classifier_policy.abstain_below,
            ),
        ] {
            if !(0.0..=1.0).contains(&minimum) {
                return reject(key, format!("{minimum} is outside [0, 1]"));
            }
        }
        Ok(())
    }
}
