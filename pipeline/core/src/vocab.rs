//! The ToM-lite controlled vocabulary (seed 000, "Persona Memory and ToM-Lite
//! Policy") and the map from known free-form variants to canonical labels.

/// The eight tom_kinds, in the seed's order.
pub const TOM_KINDS: [&str; 8] = [
    "emotion",
    "belief",
    "goal",
    "preference",
    "boundary",
    "relationship",
    "knowledge_gap",
    "unresolved_thread",
];

/// The six affects.
pub const AFFECTS: [&str; 6] = ["angry", "sad", "anxious", "confused", "happy", "neutral"];

/// The four intensities.
pub const INTENSITIES: [&str; 4] = ["low", "medium", "high", "extreme"];

/// The categories of sensitive content (issue-tracked vocabulary of the
/// sensitive content detector); `mental_health_self_harm` marks a safety
/// record.
pub const SENSITIVE_CATEGORIES: [&str; 9] = [
    "health",
    "mental_health_self_harm",
    "abuse_violence",
    "sexual",
    "finances_debt",
    "legal_trouble",
    "identity_orientation_religion",
    "third_party_secret",
    "credentials_pii",
];

/// The category whose records are safety records: listed first in the
/// curator's report and counted on their own.
pub const SAFETY_CATEGORY: &str = "mental_health_self_harm";

/// Which controlled list a label belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `tom_kind` (also an edge's relation).
    TomKind,
    /// `affect`.
    Affect,
    /// `intensity`.
    Intensity,
}

impl Field {
    /// The canonical labels of this field.
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            Field::TomKind => &TOM_KINDS,
            Field::Affect => &AFFECTS,
            Field::Intensity => &INTENSITIES,
        }
    }

    /// The field's name as the seed spells it.
    pub fn name(self) -> &'static str {
        match self {
            Field::TomKind => "tom_kind",
            Field::Affect => "affect",
            Field::Intensity => "intensity",
        }
    }

    /// Whether `label` is exactly a canonical label of this field.
    pub fn contains(self, label: &str) -> bool {
        self.labels().contains(&label)
    }
}

/// Known synonyms per field (docs/labeling.md's definitions and GoEmotions'
/// affect map), lower-case, with spaces and hyphens already folded to `_`.
const SYNONYMS: &[(Field, &str, &str)] = &[
    // tom_kind
    (Field::TomKind, "feeling", "emotion"),
    (Field::TomKind, "feelings", "emotion"),
    (Field::TomKind, "emotional_state", "emotion"),
    (Field::TomKind, "mood", "emotion"),
    (Field::TomKind, "opinion", "belief"),
    (Field::TomKind, "assumption", "belief"),
    (Field::TomKind, "judgement", "belief"),
    (Field::TomKind, "judgment", "belief"),
    (Field::TomKind, "view", "belief"),
    (Field::TomKind, "intention", "goal"),
    (Field::TomKind, "intent", "goal"),
    (Field::TomKind, "objective", "goal"),
    (Field::TomKind, "aim", "goal"),
    (Field::TomKind, "plan", "goal"),
    (Field::TomKind, "like", "preference"),
    (Field::TomKind, "likes", "preference"),
    (Field::TomKind, "dislike", "preference"),
    (Field::TomKind, "preferences", "preference"),
    (Field::TomKind, "preferred_style", "preference"),
    (Field::TomKind, "limit", "boundary"),
    (Field::TomKind, "rule", "boundary"),
    (Field::TomKind, "consent", "boundary"),
    (Field::TomKind, "boundaries", "boundary"),
    (Field::TomKind, "relation", "relationship"),
    (Field::TomKind, "relationships", "relationship"),
    (Field::TomKind, "connection", "relationship"),
    (Field::TomKind, "gap", "knowledge_gap"),
    (Field::TomKind, "question", "knowledge_gap"),
    (Field::TomKind, "knowledgegap", "knowledge_gap"),
    (Field::TomKind, "unknown", "knowledge_gap"),
    (Field::TomKind, "open_question", "unresolved_thread"),
    (Field::TomKind, "open_item", "unresolved_thread"),
    (Field::TomKind, "open_thread", "unresolved_thread"),
    (Field::TomKind, "todo", "unresolved_thread"),
    (Field::TomKind, "follow_up", "unresolved_thread"),
    (Field::TomKind, "followup", "unresolved_thread"),
    (Field::TomKind, "unresolved", "unresolved_thread"),
    // affect (docs/labeling.md: "angry (anger, annoyance, disapproval, disgust)" ...)
    (Field::Affect, "anger", "angry"),
    (Field::Affect, "annoyance", "angry"),
    (Field::Affect, "annoyed", "angry"),
    (Field::Affect, "disapproval", "angry"),
    (Field::Affect, "disgust", "angry"),
    (Field::Affect, "frustrated", "angry"),
    (Field::Affect, "frustration", "angry"),
    (Field::Affect, "furious", "angry"),
    (Field::Affect, "mad", "angry"),
    (Field::Affect, "irritated", "angry"),
    (Field::Affect, "sadness", "sad"),
    (Field::Affect, "grief", "sad"),
    (Field::Affect, "disappointment", "sad"),
    (Field::Affect, "disappointed", "sad"),
    (Field::Affect, "remorse", "sad"),
    (Field::Affect, "upset", "sad"),
    (Field::Affect, "fear", "anxious"),
    (Field::Affect, "afraid", "anxious"),
    (Field::Affect, "nervous", "anxious"),
    (Field::Affect, "nervousness", "anxious"),
    (Field::Affect, "worried", "anxious"),
    (Field::Affect, "worry", "anxious"),
    (Field::Affect, "anxiety", "anxious"),
    (Field::Affect, "scared", "anxious"),
    (Field::Affect, "stressed", "anxious"),
    (Field::Affect, "confusion", "confused"),
    (Field::Affect, "lost", "confused"),
    (Field::Affect, "puzzled", "confused"),
    (Field::Affect, "joy", "happy"),
    (Field::Affect, "joyful", "happy"),
    (Field::Affect, "gratitude", "happy"),
    (Field::Affect, "grateful", "happy"),
    (Field::Affect, "relief", "happy"),
    (Field::Affect, "relieved", "happy"),
    (Field::Affect, "pride", "happy"),
    (Field::Affect, "proud", "happy"),
    (Field::Affect, "love", "happy"),
    (Field::Affect, "excitement", "happy"),
    (Field::Affect, "excited", "happy"),
    (Field::Affect, "approval", "happy"),
    (Field::Affect, "glad", "happy"),
    (Field::Affect, "calm", "neutral"),
    (Field::Affect, "none", "neutral"),
    (Field::Affect, "matter_of_fact", "neutral"),
    // intensity
    (Field::Intensity, "mild", "low"),
    (Field::Intensity, "minor", "low"),
    (Field::Intensity, "moderate", "medium"),
    (Field::Intensity, "mid", "medium"),
    (Field::Intensity, "med", "medium"),
    (Field::Intensity, "strong", "high"),
    (Field::Intensity, "severe", "high"),
    (Field::Intensity, "critical", "extreme"),
    (Field::Intensity, "crisis", "extreme"),
    (Field::Intensity, "very_high", "extreme"),
];

/// The canonical label a free-form `label` most likely means, if it is a
/// case or spelling variant ("Preference", "knowledge gap",
/// "Knowledge-Gap") or a known synonym ("frustrated" for affect).
///
/// Returns `None` for a canonical label (nothing to suggest) and for
/// strings that are not known variants.
pub fn suggest(field: Field, label: &str) -> Option<&'static str> {
    if field.contains(label) {
        return None;
    }
    let folded: String = label
        .trim()
        .chars()
        .map(|c| match c {
            ' ' | '-' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    if let Some(&canon) = field.labels().iter().find(|l| **l == folded) {
        return Some(canon);
    }
    SYNONYMS
        .iter()
        .find(|(f, syn, _)| *f == field && *syn == folded)
        .map(|(_, _, canon)| *canon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_spacing_variants_map_to_the_canonical_label() {
        assert_eq!(suggest(Field::TomKind, "Preference"), Some("preference"));
        assert_eq!(
            suggest(Field::TomKind, "knowledge gap"),
            Some("knowledge_gap")
        );
        assert_eq!(
            suggest(Field::TomKind, " Knowledge-Gap "),
            Some("knowledge_gap")
        );
        assert_eq!(suggest(Field::Affect, "NEUTRAL"), Some("neutral"));
    }

    #[test]
    fn synonyms_are_suggested_per_field() {
        assert_eq!(suggest(Field::Affect, "frustrated"), Some("angry"));
        assert_eq!(suggest(Field::Affect, "Worried"), Some("anxious"));
        assert_eq!(suggest(Field::TomKind, "opinion"), Some("belief"));
        assert_eq!(suggest(Field::Intensity, "moderate"), Some("medium"));
        // A synonym of one field is not one of another.
        assert_eq!(suggest(Field::TomKind, "frustrated"), None);
    }

    #[test]
    fn canonical_and_unknown_labels_get_no_suggestion() {
        assert_eq!(suggest(Field::TomKind, "goal"), None);
        assert_eq!(suggest(Field::TomKind, "vibes"), None);
    }
}
