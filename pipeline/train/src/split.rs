//! The dev split: whole styles held out, a stable 15 % of the records
//! without a style, and the calibration ids kept out of fine-tuning.

use tomlite_models::data::{LabeledRecord, is_dev};

/// Whole styles of `data/training/styles` held out of training, for the
/// dev split and `tomlite eval --dev`: four kinds of writing the others do
/// not cover (emoji-heavy social posts, memories told in the third person,
/// reported speech of other people, logistics with no signal), and three
/// of the fourteen styles of parts i-o (dictated speech, a coach's session
/// notes, journal entries of mixed tones), records like the job's own that
/// no training record was written as.
pub const HELD_OUT_STYLES: [&str; 7] = [
    "emoji_social",
    "third_person_memory",
    "reported_speech",
    "logistics_admin",
    "dictated_speech_to_text",
    "coach_session_notes",
    "mixed_tone_journal",
];

/// Whether a labeled record belongs to the dev split: its style is one of
/// [`HELD_OUT_STYLES`]; a record without a style (the first set) by the
/// stable hash of its id ([`is_dev`], 15 %).
pub fn is_held_out(r: &LabeledRecord) -> bool {
    match &r.style {
        Some(style) => HELD_OUT_STYLES.contains(&style.as_str()),
        None => is_dev(&r.id),
    }
}

/// FNV-1a of an id, as [`is_dev`] hashes it, in 0..100.
fn id_bucket(id: &str) -> u64 {
    tomlite_models::data::fnv1a64(id) % 100
}

/// Whether a training record is kept out of fine-tuning so that the
/// calibration of the heads fitted afterwards sees records the encoder
/// never saw: the ids whose hash falls in 15..35 (a fifth of them; dev
/// is 0..15).
pub fn is_calibration(id: &str) -> bool {
    (15..35).contains(&id_bucket(id))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tomlite_models::data::is_dev;

    use super::*;

    fn labeled(id: &str, text: &str, kinds: &[&str], quotes: &[&str]) -> LabeledRecord {
        serde_json::from_value(json!({
            "id": id, "text": text,
            "gold": {"tom_kinds": kinds, "affect": "sad", "intensity": "high",
                     "source_quotes": quotes}
        }))
        .expect("labeled record")
    }

    // The dev split holds out whole styles; records without one by id hash.
    #[test]
    fn held_out_split_takes_whole_styles_and_hashes_the_rest() {
        let mut r = labeled("a-1", "x", &[], &[]);
        for (style, held) in [
            ("emoji_social", true),
            ("logistics_admin", true),
            ("bullet_session", false),
        ] {
            r.style = Some(style.into());
            assert_eq!(is_held_out(&r), held, "{style}");
        }
        for i in 0..100 {
            let r = labeled(&format!("id-{i}"), "x", &[], &[]);
            assert_eq!(is_held_out(&r), is_dev(&r.id));
            assert!(!(is_dev(&r.id) && is_calibration(&r.id)));
        }
    }
}
