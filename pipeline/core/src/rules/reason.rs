//! The quarantine reasons: a closed set, named as in the seed.

/// Why an item is quarantined: a closed set, spelled as in the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A confidence is under its minimum, or missing.
    ConfidenceBelowThreshold,
    /// No quote, an empty one, or not verbatim at its byte offsets.
    SourceQuoteMissing,
    /// An edge's source or target is neither a registry node nor an input memory.
    UnknownTargetNode,
    /// The record has more edge candidates than allowed.
    MoreThanTwoEdgeCandidates,
    /// A label outside the controlled vocabulary.
    FreeformTomLabel,
    /// The record is flagged `sensitive` or `safety`, or its annotation
    /// detected sensitive content the policy quarantines.
    SensitiveBoundaryOrSafetyRecord,
    /// The record has more tags (or affects) than allowed, or a kind twice.
    TooManyLabels,
    /// The annotation (or a field of it) could not be read.
    UnparseableAnnotation,
}

impl Reason {
    /// The seed's `quarantine_when` list.
    pub const SEED: [Reason; 6] = [
        Reason::ConfidenceBelowThreshold,
        Reason::SourceQuoteMissing,
        Reason::UnknownTargetNode,
        Reason::MoreThanTwoEdgeCandidates,
        Reason::FreeformTomLabel,
        Reason::SensitiveBoundaryOrSafetyRecord,
    ];

    /// Every reason.
    pub const ALL: [Reason; 8] = [
        Reason::ConfidenceBelowThreshold,
        Reason::SourceQuoteMissing,
        Reason::UnknownTargetNode,
        Reason::MoreThanTwoEdgeCandidates,
        Reason::FreeformTomLabel,
        Reason::SensitiveBoundaryOrSafetyRecord,
        Reason::TooManyLabels,
        Reason::UnparseableAnnotation,
    ];

    /// The reason's snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ConfidenceBelowThreshold => "confidence_below_threshold",
            Reason::SourceQuoteMissing => "source_quote_missing",
            Reason::UnknownTargetNode => "unknown_target_node",
            Reason::MoreThanTwoEdgeCandidates => "more_than_two_edge_candidates",
            Reason::FreeformTomLabel => "freeform_tom_label",
            Reason::SensitiveBoundaryOrSafetyRecord => "sensitive_boundary_or_safety_record",
            Reason::TooManyLabels => "too_many_labels",
            Reason::UnparseableAnnotation => "unparseable_annotation",
        }
    }

    /// Parses a snake_case name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}
