//! Sensitive content without a flag: the detector's head (trained on
//! `data/sensitivity`), and how its probabilities and the identifier rules
//! ([`crate::annotate::sensitive_rules`]) become one record's [`Sensitive`].
//!
//! The head reads the same sentence vector as the other heads (no second
//! encoder pass): a softmax over `none` and the nine categories, so
//! P(sensitive) = 1 − P(none). Each sentence is scored by the same head on
//! its in-context vector, and the surest sentence is the quote.

use crate::annotate::sensitive_rules::Rules;
use crate::annotate::{Quote, Sensitive};
use crate::vocab::{SAFETY_CATEGORY, SENSITIVE_CATEGORIES};

/// The head's labels: `none`, then [`SENSITIVE_CATEGORIES`].
pub fn labels() -> Vec<String> {
    std::iter::once("none")
        .chain(SENSITIVE_CATEGORIES)
        .map(str::to_string)
        .collect()
}

/// The default detection threshold on P(sensitive): chosen for recall (a
/// missed self-harm record costs more than a quarantined workout note).
pub const DEFAULT_THRESHOLD: f64 = 0.35;

/// The default threshold of a detection whose category is
/// `mental_health_self_harm` (the policy's `safety_threshold`): the same as
/// [`DEFAULT_THRESHOLD`]. A safety record is worth more quarantines of
/// ordinary ones, so a policy may set it lower than the others; lowering
/// it costs controls flagged, because emotional records without a
/// sensitive line are most often read as this category.
pub const DEFAULT_SAFETY_THRESHOLD: f64 = 0.35;

/// The P(sensitive) at or above which a detection counts: `safety` for a
/// detection whose category is `mental_health_self_harm`, `general` for
/// the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Every category but `mental_health_self_harm`.
    pub general: f64,
    /// `mental_health_self_harm`.
    pub safety: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            general: DEFAULT_THRESHOLD,
            safety: DEFAULT_SAFETY_THRESHOLD,
        }
    }
}

impl Thresholds {
    /// One threshold for every category.
    pub fn uniform(t: f64) -> Self {
        Self {
            general: t,
            safety: t,
        }
    }

    /// The threshold of a detection of `category`.
    pub fn of(&self, category: &str) -> f64 {
        if category == SAFETY_CATEGORY {
            self.safety
        } else {
            self.general
        }
    }
}

/// The version of the rules (identifiers, self-harm statements, content), part
/// of the annotator id: a change of what the rules find redoes the records
/// annotated under the old ones.
pub const RULES_VERSION: &str = "sensitive-rules-14";

/// The version of how the detector reads the model's scores
/// ([`head_probability`]), part of the annotator id like the rules': a
/// record read another way is annotated again.
pub const READING_VERSION: &str = "sensitive-reading-3";

/// The most likely category of the head's distribution `p` (`none` first):
/// its index among the labels (1 and up), whatever `none`'s P.
pub fn most_likely_category(p: &[f64]) -> usize {
    p.iter()
        .enumerate()
        .skip(1)
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(1, |(c, _)| c)
}

/// The most passages a record may have and still be read as a whole: a
/// longer one is sensitive when one of its passages is, so its whole text
/// is neither a training example nor a reading of the detector. A long
/// journal with one sensitive line is a bag of ordinary passages and one
/// sensitive one; labeled as a whole, it teaches the head and the words
/// that ordinary content is sensitive, and read as a whole, every long
/// text with a few topical words looks like one.
pub const WHOLE_TEXT_MAX_PASSAGES: usize = 3;

/// Whether a record of `passages` passages is read as a whole as well as
/// by its passages ([`WHOLE_TEXT_MAX_PASSAGES`]).
pub fn reads_whole_text(passages: usize) -> bool {
    passages <= WHOLE_TEXT_MAX_PASSAGES
}

/// The lexical model's P(sensitive) of `text`, then of each of its
/// `sentences` (byte spans): the `lexical` input of [`head_probability`]
/// and [`detect`].
pub fn lexical_probabilities(
    model: &tomlite_models::lexical::Lexical,
    text: &str,
    sentences: &[(usize, usize)],
) -> Vec<f64> {
    std::iter::once(text)
        .chain(sentences.iter().map(|&(s, e)| &text[s..e]))
        .map(|t| model.probability(t))
        .collect()
}

/// P(sensitive) as the detector reads a record: its surest reading. The
/// readings are the whole text (1 − P(none) of `record`) and each passage
/// (one line of a long journal can carry it while the whole text dilutes
/// it); a record of more passages than [`WHOLE_TEXT_MAX_PASSAGES`] is read
/// by its passages alone. With a lexical model (`lexical`: P of the whole
/// text, then of each passage; empty without one), a reading is the mean
/// of the head's and the lexical model's P of the same text: the words
/// separate what the pooled vector blurs ("technical debt", "my cat's
/// surgery"), and a record is as sensitive as its one text that both
/// models find sensitive, not as the head's surest line and the words'
/// surest line added up when they are different lines (a short ordinary
/// line the head over-scores, beside a topical word elsewhere).
pub fn head_probability(
    record: &[f64],
    sentences: &[((usize, usize), f64)],
    lexical: &[f64],
) -> f64 {
    whole_reading(record, sentences.len(), lexical)
        .into_iter()
        .chain(passage_readings(sentences, lexical))
        .fold(0.0, f64::max)
}

/// The whole text's reading ([`head_probability`]), `None` for a record
/// of more passages than [`WHOLE_TEXT_MAX_PASSAGES`].
fn whole_reading(record: &[f64], passages: usize, lexical: &[f64]) -> Option<f64> {
    reads_whole_text(passages).then(|| {
        let head = 1.0 - record.first().copied().unwrap_or(1.0);
        reading(head, lexical, 0)
    })
}

/// Each passage's reading ([`head_probability`]): the mean of the head's
/// P and the lexical model's P of the passage (`lexical[i + 1]`), or the
/// head's alone without a lexical model. The quote is the surest.
fn passage_readings<'a>(
    sentences: &'a [((usize, usize), f64)],
    lexical: &'a [f64],
) -> impl Iterator<Item = f64> + 'a {
    sentences
        .iter()
        .enumerate()
        .map(|(i, s)| reading(s.1, lexical, i + 1))
}

/// One text's reading: the head's P `head`, mixed with the lexical
/// model's P of the same text (`lexical[at]`) when there is a lexical
/// model.
fn reading(head: f64, lexical: &[f64], at: usize) -> f64 {
    if lexical.is_empty() {
        head
    } else {
        mix(head, lexical.get(at).copied().unwrap_or(0.0), LEXICAL_SHARE)
    }
}

/// The lexical model's share of a reading: an equal mean. Training
/// checks it on every fit by cross-validation over whole training styles
/// (`tomlite_train::style_cv`): the best share of the sweep was 0.45
/// before part p and 0.55 after, each within noise of this one.
pub const LEXICAL_SHARE: f64 = 0.5;

/// A reading with the lexical model's P `lexical` at `share` and the
/// head's P `head` at the rest.
pub fn mix(head: f64, lexical: f64, share: f64) -> f64 {
    (1.0 - share) * head + share * lexical
}

/// The detector's verdict on one record, from the head's distribution over
/// the record (`record`: `none` first), P(sensitive) of each sentence
/// (`sentences`, with their spans), the lexical model's P of the record
/// and of each sentence (`lexical`, empty without one; see
/// [`head_probability`]), the head's most likely category of each
/// sentence (`categories`, label indices; empty: the record's), and the
/// identifier rules.
///
/// - The rules find identifiers and secrets (`credentials_pii`,
///   confidence 1: a Luhn-valid card number is not a matter of degree) and
///   statements of self-harm or suicidal thoughts
///   (`mental_health_self_harm`, confidence 1: "I want to die" is a safety
///   record whatever the head makes of it), and sensitive content said in
///   so many words (a tax audit, a lawyer's letter, a kink dating profile:
///   `finances_debt`, `legal_trouble`, `sexual`, confidence 1). The detector names the rule
///   that fired: `rules:<rule id>` (`rules:identifier.card_number`,
///   `rules:safety.wish_to_die`; [`crate::annotate::sensitive_rules::named_rules`]).
/// - The model reads the record as [`head_probability`] does, each
///   reading with a category: a passage's is the head's most likely one
///   on that passage, the whole text's the record's. The surest reading
///   (the passage on a tie with the whole text) detects when it reaches
///   the threshold of its category ([`Thresholds::of`]); when it does
///   not, the surest `mental_health_self_harm` reading that reaches the
///   safety threshold does. The confidence is the detecting reading's P,
///   the quote its passage (the surest passage for the whole text). A
///   long journal's one self-harm line is a safety record even when the
///   record reads, on the whole, as something else; a surer line of
///   another category names the detection (filing every record with a
///   self-harm-like line as a safety record filed 4 more of the 91
///   held-out sensitive records under it, none of them self-harm
///   records, and overrode an identifier the rules had found).
/// - When several fire, a safety record wins (the head's, else the
///   rules'), then the rules' identifier, then the rules' content, then
///   the head's category.
pub fn detect(
    text: &str,
    record: Option<&[f64]>,
    sentences: &[((usize, usize), f64)],
    lexical: &[f64],
    categories: &[usize],
    rules: &Rules,
    thresholds: &Thresholds,
) -> Option<Sensitive> {
    let model = record.and_then(|p| {
        if p.len() < 2 {
            return None;
        }
        let record_category = most_likely_category(p);
        // Each reading: its P, its category and its quote. A passage's
        // category is the head's on the passage (the record's without
        // one); the whole text's is the record's, and its quote the
        // surest passage.
        let passages: Vec<(f64, usize, (usize, usize))> = sentences
            .iter()
            .zip(passage_readings(sentences, lexical))
            .enumerate()
            .map(|(i, (&(span, _), r))| {
                let c = categories
                    .get(i)
                    .copied()
                    .filter(|c| (1..p.len()).contains(c))
                    .unwrap_or(record_category);
                (r, c, span)
            })
            .collect();
        let surest_passage = passages.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0));
        let quote = surest_passage.map_or((0, text.len()), |r| r.2);
        let whole = whole_reading(p, sentences.len(), lexical).map(|r| (r, record_category, quote));
        let label = |c: usize| SENSITIVE_CATEGORIES[c - 1];
        // The surest reading detects at its category's threshold; a tie
        // between the whole text and a passage goes to the passage (the
        // quote).
        let surest = match (whole, surest_passage) {
            (Some(w), Some(s)) if w.0 <= s.0 => s,
            (Some(w), _) => w,
            (None, s) => s?,
        };
        if surest.0 >= thresholds.of(label(surest.1)) {
            return Some(found(
                text,
                label(surest.1),
                surest.0,
                surest.2,
                "model".into(),
            ));
        }
        // Under it, a self-harm reading still detects at the safety
        // threshold (a policy may set it lower than the others).
        let (confidence, c, span) = passages
            .iter()
            .copied()
            .chain(whole)
            .filter(|r| label(r.1) == SAFETY_CATEGORY && r.0 >= thresholds.safety)
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        Some(found(text, label(c), confidence, span, "model".into()))
    });
    if let Some(m) = &model
        && m.category.as_deref() == Some(SAFETY_CATEGORY)
    {
        return model;
    }
    // The sentence that holds a rule's finding is its quote.
    let sentence_of = |start: usize, end: usize| {
        sentences
            .iter()
            .map(|&(span, _)| span)
            .find(|&(s, e)| s <= start && end <= e)
            .unwrap_or((start, end))
    };
    if let Some(f) = rules.find_safety(text) {
        return Some(found(
            text,
            SAFETY_CATEGORY,
            1.0,
            sentence_of(f.start, f.end),
            format!("rules:{}", f.rule),
        ));
    }
    let rule = rules.find(text).into_iter().next().map(|f| {
        found(
            text,
            "credentials_pii",
            1.0,
            sentence_of(f.start, f.end),
            format!("rules:{}", f.rule),
        )
    });
    // Then sensitive content said in so many words (a tax audit, a
    // lawyer's letter, a kink dating profile), in its own category.
    let rule = rule.or_else(|| {
        rules.find_content(text).map(|f| {
            found(
                text,
                f.category,
                1.0,
                sentence_of(f.start, f.end),
                format!("rules:{}", f.rule),
            )
        })
    });
    rule.or(model)
}

fn found(
    text: &str,
    category: &str,
    confidence: f64,
    (start, end): (usize, usize),
    detector: String,
) -> Sensitive {
    // Trim the sentence's surrounding whitespace: the quote is its words.
    let raw = &text[start..end];
    let lead = raw.len() - raw.trim_start().len();
    let (start, end) = (start + lead, start + lead + raw.trim().len());
    Sensitive {
        category: Some(category.to_string()),
        confidence: Some(round4(confidence)),
        quote: Quote {
            text: Some(text[start..end].to_string()),
            start: Some(start as u64),
            end: Some(end as u64),
        },
        detector: Some(detector),
        problems: Vec::new(),
    }
}

/// `x` rounded to four decimals, as the figures in cards and reports are.
pub fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p_of(category: &str, p: f64) -> Vec<f64> {
        let mut v = vec![0.0; 10];
        let c = SENSITIVE_CATEGORIES
            .iter()
            .position(|k| *k == category)
            .unwrap();
        v[0] = 1.0 - p;
        v[c + 1] = p;
        v
    }

    /// [`detect`] with the rules and one threshold `t` for every category.
    fn detect_at(
        t: f64,
        text: &str,
        record: Option<&[f64]>,
        sentences: &[((usize, usize), f64)],
        lexical: &[f64],
    ) -> Option<Sensitive> {
        detect(
            text,
            record,
            sentences,
            lexical,
            &[],
            &Rules::new(),
            &Thresholds::uniform(t),
        )
    }

    #[test]
    fn the_head_detects_at_the_threshold_and_quotes_its_surest_sentence() {
        let text = "Gym was fine. Some nights I don't see the point of any of it.";
        let second = text.find("Some").unwrap();
        let sentences = [((0, second), 0.1), ((second, text.len()), 0.7)];
        let p = p_of("mental_health_self_harm", 0.8);
        let s = detect_at(0.35, text, Some(&p), &sentences, &[]).unwrap();
        assert_eq!(s.category.as_deref(), Some("mental_health_self_harm"));
        assert_eq!(s.confidence, Some(0.8));
        assert_eq!(s.detector.as_deref(), Some("model"));
        assert_eq!(
            s.quote.text.as_deref(),
            Some("Some nights I don't see the point of any of it.")
        );
        assert_eq!(s.quote.start, Some(second as u64));
        assert!(s.quote.is_verbatim(text));
        // Under the threshold, nothing (a text no rule finds anything in).
        let text = "Gym was fine. Some nights I sleep badly after late sessions.";
        let second = text.find("Some").unwrap();
        let calm = [((0, second), 0.1), ((second, text.len()), 0.2)];
        assert!(detect_at(0.35, text, Some(&p_of("health", 0.3)), &calm, &[]).is_none());
    }

    // One line of a long journal carries it: the record as a whole may
    // stay under the threshold while that sentence does not.
    #[test]
    fn a_sentence_over_the_threshold_detects_a_record_under_it() {
        let text =
            "Work was long. Walked the dog. Stopped the tablets again, don't see why I'd bother.";
        let third = text.find("Stopped").unwrap();
        let sentences = [
            ((0, 14), 0.05),
            ((15, third), 0.02),
            ((third, text.len()), 0.6),
        ];
        let p = p_of("mental_health_self_harm", 0.2);
        let s = detect_at(0.35, text, Some(&p), &sentences, &[]).unwrap();
        assert_eq!(s.confidence, Some(0.6));
        assert_eq!(s.category.as_deref(), Some("mental_health_self_harm"));
        assert_eq!(
            s.quote.text.as_deref(),
            Some("Stopped the tablets again, don't see why I'd bother.")
        );
        let calm = [
            ((0, 14), 0.05),
            ((15, third), 0.02),
            ((third, text.len()), 0.3),
        ];
        assert!(detect_at(0.35, text, Some(&p), &calm, &[]).is_none());
    }

    #[test]
    fn a_stated_wish_to_die_is_a_safety_record_even_when_the_head_says_otherwise() {
        let text = "Card is 4111 1111 1111 1111. I just want to die some days.";
        let second = text.find("I just").unwrap();
        let sentences = [((0, second), 0.1), ((second, text.len()), 0.2)];
        // The head is sure of another category, and the card rule fires
        // too: the safety statement wins, quoted by its sentence.
        let s = detect_at(
            0.35,
            text,
            Some(&p_of("finances_debt", 0.9)),
            &sentences,
            &[],
        )
        .unwrap();
        assert_eq!(s.category.as_deref(), Some("mental_health_self_harm"));
        assert_eq!(s.detector.as_deref(), Some("rules:safety.wish_to_die"));
        assert_eq!(s.confidence, Some(1.0));
        assert_eq!(
            s.quote.text.as_deref(),
            Some("I just want to die some days.")
        );
        assert!(s.quote.is_verbatim(text));
    }

    #[test]
    fn an_identifier_the_rules_find_is_credentials_pii_unless_the_head_sees_a_safety_record() {
        let text = "Card is 4111 1111 1111 1111. Rent is due.";
        let end = text.find(" Rent").unwrap();
        let sentences = [((0, end + 1), 0.2), ((end + 1, text.len()), 0.1)];
        let s = detect_at(
            0.35,
            text,
            Some(&p_of("finances_debt", 0.6)),
            &sentences,
            &[],
        )
        .unwrap();
        assert_eq!(s.category.as_deref(), Some("credentials_pii"));
        assert_eq!(s.confidence, Some(1.0));
        assert_eq!(s.detector.as_deref(), Some("rules:identifier.card_number"));
        assert_eq!(
            s.quote.text.as_deref(),
            Some("Card is 4111 1111 1111 1111.")
        );
        let safety = p_of("mental_health_self_harm", 0.7);
        let s = detect_at(0.35, text, Some(&safety), &sentences, &[]).unwrap();
        assert_eq!(s.category.as_deref(), Some("mental_health_self_harm"));
        // Without a head (older heads) the rules still run.
        let s = detect_at(0.35, text, None, &sentences, &[]).unwrap();
        assert_eq!(s.detector.as_deref(), Some("rules:identifier.card_number"));
    }

    // With a lexical model each reading (the record, each sentence) is
    // the mean of the head's and the words' P of that text; P(sensitive)
    // is the surest reading, and the quote the sentence surest on both.
    #[test]
    fn a_lexical_model_is_averaged_with_the_head_and_steers_the_quote() {
        let text = "Technical debt again. My cat's surgery is Friday.";
        let second = text.find("My").unwrap();
        let sentences = [((0, second), 0.5), ((second, text.len()), 0.4)];
        let p = p_of("health", 0.3);
        // Head: record 0.3, sentences 0.5 and 0.4; words: record 0.1,
        // sentences 0.05 and 0.2. Readings 0.2, 0.275, 0.3.
        let lexical = [0.1, 0.05, 0.2];
        assert!((head_probability(&p, &sentences, &lexical) - 0.3).abs() < 1e-12);
        assert!((head_probability(&p, &sentences, &[]) - 0.5).abs() < 1e-12);
        let s = detect_at(0.3, text, Some(&p), &sentences, &lexical).unwrap();
        assert_eq!(s.confidence, Some(0.3));
        assert_eq!(s.quote.text.as_deref(), Some("My cat's surgery is Friday."));
        assert!(detect_at(0.3, text, Some(&p), &sentences, &[0.0, 0.0, 0.1]).is_none());
    }

    // The head's surest line and the words' surest line do not add up
    // when they are different lines: a short ordinary line the head
    // over-scores ("Auntie told me.") beside a topical word in another
    // line ("the loan") is not read as one sensitive line.
    #[test]
    fn the_head_and_the_words_must_agree_on_one_line() {
        let text = "Auntie told me. Paid the loan off today.";
        let second = text.find("Paid").unwrap();
        let sentences = [((0, second), 0.7), ((second, text.len()), 0.1)];
        let p = p_of("health", 0.2);
        // Words: record 0.2, sentences 0.05 and 0.5.
        let lexical = [0.2, 0.05, 0.5];
        // Readings: record 0.2, first line 0.375, second line 0.3; the
        // surest line of each alone would add up to 0.6.
        assert!((head_probability(&p, &sentences, &lexical) - 0.375).abs() < 1e-12);
        assert!(detect_at(0.4, text, Some(&p), &sentences, &lexical).is_none());
        // When both find the same line sensitive, it is.
        let lexical = [0.2, 0.6, 0.1];
        let s = detect_at(0.4, text, Some(&p), &sentences, &lexical).unwrap();
        assert_eq!(s.confidence, Some(0.65));
        assert_eq!(s.quote.text.as_deref(), Some("Auntie told me."));
    }

    // A record of more passages than WHOLE_TEXT_MAX_PASSAGES is read by
    // its passages alone: a long control whose topical words add up over
    // the whole text (a sick pet's vet visits, a crime novel) is not
    // detected on the whole text, and a long record with one sensitive
    // passage still is, by that passage.
    #[test]
    fn a_long_record_is_read_by_its_passages_alone() {
        let text =
            "Vet again. Insulin twice a day. Kept the blood sugar chart. Then the drive home.";
        let starts: Vec<usize> = ["Vet", "Insulin", "Kept", "Then"]
            .iter()
            .map(|w| text.find(w).unwrap())
            .collect();
        let span = |i: usize| (starts[i], starts.get(i + 1).map_or(text.len(), |&e| e - 1));
        let p = p_of("health", 0.7);
        let calm: Vec<((usize, usize), f64)> = (0..4).map(|i| (span(i), 0.2)).collect();
        // The whole text: head 0.7, words 0.9; each passage 0.2 and 0.1.
        let lexical = [0.9, 0.1, 0.1, 0.1, 0.1];
        assert_eq!(WHOLE_TEXT_MAX_PASSAGES, 3);
        assert!((head_probability(&p, &calm, &lexical) - 0.15).abs() < 1e-12);
        assert!(detect_at(0.35, text, Some(&p), &calm, &lexical).is_none());
        // Three passages: the whole text is read too.
        assert!((head_probability(&p, &calm[..3], &lexical[..4]) - 0.8).abs() < 1e-12);
        // One sure passage detects the long record and is its quote.
        let mut one = calm.clone();
        one[1].1 = 0.8;
        let lexical = [0.9, 0.1, 0.6, 0.1, 0.1];
        let s = detect_at(0.35, text, Some(&p), &one, &lexical).unwrap();
        assert_eq!(s.confidence, Some(0.7));
        assert_eq!(s.quote.text.as_deref(), Some("Insulin twice a day."));
        assert!(s.quote.is_verbatim(text));
    }

    // A safety record may have a lower threshold than the other
    // categories: the record's most likely category picks which applies.
    #[test]
    fn a_safety_detection_is_held_to_its_own_threshold() {
        let text = "Gym was fine. The new dose starts on Monday.";
        let second = text.find("The").unwrap();
        let sentences = [((0, second), 0.1), ((second, text.len()), 0.4)];
        let rules = Rules::new();
        let t = Thresholds {
            general: 0.5,
            safety: 0.35,
        };
        let safety = p_of("mental_health_self_harm", 0.3);
        let s = detect(text, Some(&safety), &sentences, &[], &[], &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some("mental_health_self_harm"));
        assert_eq!(s.confidence, Some(0.4));
        assert!(
            detect(
                text,
                Some(&p_of("health", 0.3)),
                &sentences,
                &[],
                &[],
                &rules,
                &t
            )
            .is_none()
        );
        assert_eq!(Thresholds::uniform(0.4).of(SAFETY_CATEGORY), 0.4);
    }

    // The category is the surest reading's: the passage that carries the
    // detection names it, unless the whole text reads surer.
    #[test]
    fn the_surest_passage_names_the_category() {
        let label = |c: &str| SENSITIVE_CATEGORIES.iter().position(|k| *k == c).unwrap() + 1;
        let text = "Watched the film with the bathroom scene. Had to look away. \
                    Slept badly. Stopped the tablets, don't see why I'd bother.";
        let spans: Vec<(usize, usize)> = ["Watched", "Had", "Slept", "Stopped"]
            .iter()
            .map(|w| text.find(w).unwrap())
            .zip(
                ["Had", "Slept", "Stopped"]
                    .iter()
                    .map(|w| text.find(w).unwrap())
                    .chain([text.len()]),
            )
            .collect();
        let ps = [0.3, 0.1, 0.1, 0.7];
        let sentences: Vec<_> = spans.iter().copied().zip(ps).collect();
        let categories = [
            label("sexual"),
            label("health"),
            label("health"),
            label("mental_health_self_harm"),
        ];
        // Four passages: the record is read by its passages; on the whole
        // the head says `sexual`, the last line says self-harm.
        let record = p_of("sexual", 0.5);
        let t = Thresholds {
            general: 0.5,
            safety: 0.35,
        };
        let rules = Rules::new();
        let s = detect(
            text,
            Some(&record),
            &sentences,
            &[],
            &categories,
            &rules,
            &t,
        )
        .unwrap();
        assert_eq!(s.category.as_deref(), Some(SAFETY_CATEGORY));
        assert_eq!(
            s.quote.text.as_deref(),
            Some("Stopped the tablets, don't see why I'd bother.")
        );
        assert_eq!(s.confidence, Some(0.7));
        // Without per-passage categories, the record's names it, and its
        // threshold (0.5) still lets 0.7 through.
        let s = detect(text, Some(&record), &sentences, &[], &[], &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some("sexual"));
        // A short record whose whole text reads surer than any passage
        // takes the record's category...
        let short = &sentences[2..];
        let whole = p_of("health", 0.9);
        let calm = [label("health"), label("health")];
        let s = detect(text, Some(&whole), short, &[], &calm, &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some("health"));
        assert_eq!(s.confidence, Some(0.9));
        // ... also when one of its passages reads as self-harm, less sure.
        let s = detect(text, Some(&whole), short, &[], &categories[2..], &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some("health"));
        // A passage as sure as the whole text names it.
        let tie = p_of("health", 0.7);
        let s = detect(text, Some(&tie), short, &[], &categories[2..], &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some(SAFETY_CATEGORY));
        // A self-harm line under the general threshold but at the safety
        // one detects, though a surer line of another category does not
        // reach the general threshold.
        let mut mixed = sentences.clone();
        mixed[0].1 = 0.45;
        mixed[3].1 = 0.4;
        let s = detect(text, Some(&record), &mixed, &[], &categories, &rules, &t).unwrap();
        assert_eq!(s.category.as_deref(), Some(SAFETY_CATEGORY));
        assert_eq!(s.confidence, Some(0.4));
        assert!(s.quote.text.as_deref().unwrap().starts_with("Stopped"));
        // A long record is not read as a whole: its own most likely
        // category does not name a detection its passages make.
        let no_safety = [
            label("health"),
            label("health"),
            label("health"),
            label("health"),
        ];
        let s = detect(
            text,
            Some(&p_of(SAFETY_CATEGORY, 0.6)),
            &sentences,
            &[],
            &no_safety,
            &rules,
            &t,
        )
        .unwrap();
        assert_eq!(s.category.as_deref(), Some("health"));
        assert_eq!(s.confidence, Some(0.7));
        // A passage category under its own threshold detects nothing.
        let mut weak = sentences.clone();
        weak[3].1 = 0.3;
        assert!(
            detect(
                text,
                Some(&p_of("sexual", 0.2)),
                &weak,
                &[],
                &categories,
                &rules,
                &t
            )
            .is_none()
        );
    }
}
