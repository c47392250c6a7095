//! How a raw annotator output was read: the verdict parser's classes and
//! escape shapes, staged with every row of the record.

/// How a raw output was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParseClass {
    /// The whole text is one annotation object.
    Strict,
    /// The last complete annotation object inside the text.
    Lenient,
    /// A known non-JSON shape of the escape map.
    Escape,
    /// Nothing could be read: the record is quarantined with its raw text.
    Anomaly,
}

impl ParseClass {
    /// Every class, in cascade order.
    pub const ALL: [ParseClass; 4] = [
        ParseClass::Strict,
        ParseClass::Lenient,
        ParseClass::Escape,
        ParseClass::Anomaly,
    ];

    /// The class's name (the event name for the recoveries and the anomaly).
    pub fn as_str(self) -> &'static str {
        match self {
            ParseClass::Strict => "STRICT",
            ParseClass::Lenient => "LENIENT-RECOVERY",
            ParseClass::Escape => "ESCAPE-RECOVERY",
            ParseClass::Anomaly => "ANOMALY",
        }
    }
}

/// The escape map: known non-JSON shapes and how each becomes an annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EscapeShape {
    /// `{'tags': [...], 'affect': None,}`: single-quoted strings,
    /// `True`/`False`/`None`, trailing commas; read as the JSON it means.
    RelaxedObject,
    /// One line of `|`-separated `key: value` fields:
    /// `tom_kind: preference (0.91) | affect: neutral (0.8) | quote: "…"`.
    PipeLine,
    /// Consecutive `key: value` lines (the seed's ToM-lite example blocks).
    KeyValueBlock,
    /// A last line `ABSTAIN`/`NO-TOM-SIGNAL` (`ABSTAIN: best goal (0.42)`):
    /// an annotation with no tag, so the record is abstained.
    AbstainMarker,
}

impl EscapeShape {
    /// Every shape, in the order they are tried.
    pub const ALL: [EscapeShape; 4] = [
        EscapeShape::RelaxedObject,
        EscapeShape::PipeLine,
        EscapeShape::KeyValueBlock,
        EscapeShape::AbstainMarker,
    ];

    /// The shape's snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            EscapeShape::RelaxedObject => "relaxed_object",
            EscapeShape::PipeLine => "pipe_line",
            EscapeShape::KeyValueBlock => "key_value_block",
            EscapeShape::AbstainMarker => "abstain_marker",
        }
    }
}

/// How one record's raw output was read: its class, and the escape shape
/// of an `ESCAPE-RECOVERY`. Staged with each of the record's rows
/// (`parse_class`, `escape_shape`), so the outputs that needed rescue can
/// be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadAs {
    /// The class.
    pub class: ParseClass,
    /// The shape, for [`ParseClass::Escape`].
    pub shape: Option<EscapeShape>,
}
