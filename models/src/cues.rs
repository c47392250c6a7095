//! Wording cues: the surface marks the labeling guide's decision steps
//! read, as a few numbers per text, for the heads to read beside the
//! embedding.
//!
//! The guide decides intensity by how a record is worded (a crisis phrase,
//! two words in capitals, swearing with a doubled mark, an exclamation
//! mark, an intensifier, a repeated grievance, a hedge) and affect first by
//! an explicit feeling word. The encoder is uncased and mean-pooled, so it
//! loses capitals and blurs one "!" or one "a bit" in a long record. A head
//! whose spec sets [`crate::heads::HeadSpec::wording_cues`] reads the
//! embedding followed by [`wording_cues`] of the same text; the cues are a
//! pure function of the text, so training and inference see the same ones.
//!
//! The word lists follow the guide's steps; they are part of the model's
//! contract (changing one changes every head trained with cues, so the
//! version is in [`CUES_VERSION`] and in the heads' card).

use std::borrow::Cow;

use crate::Error;
use crate::rows::Rows;

/// How many cues [`wording_cues`] returns.
pub const CUES: usize = 20;

/// The cue set's version, written in a head's card: bump it when a list
/// or a cue changes.
pub const CUES_VERSION: u32 = 1;

/// The name of each cue, in order (for cards and reports).
pub const CUE_NAMES: [&str; CUES] = [
    "crisis",
    "shouting",
    "swearing_doubled_mark",
    "doubled_mark",
    "exclamation",
    "capitalised_word",
    "intensifier",
    "repetition",
    "insisting",
    "consequence",
    "hedge",
    "question",
    "swearing",
    "feeling_angry",
    "feeling_sad",
    "feeling_anxious",
    "feeling_confused",
    "feeling_happy",
    "negation",
    "length",
];

/// Step 1 of intensity: crisis or safety wording. Entries are phrases of
/// lower-case words; a trailing `*` matches any word that starts with it.
const CRISIS: &[&str] = &[
    "kill myself",
    "killing myself",
    "suicid*",
    "self harm",
    "self-harm",
    "overdos*",
    "want to disappear",
    "wanted to disappear",
    "end it all",
    "can't take it anymore",
    "cant take it anymore",
    "can't take this anymore",
    "can't do this anymore",
    "panic attack",
    "panic attacks",
    "call the police",
    "called the police",
    "calling the police",
    "hurt myself",
    "hurting myself",
    "not safe",
    "threatened",
    "threatening",
    "want to die",
    "wanted to die",
];

/// Step 2 of intensity: an intensifier on the feeling or stake.
const INTENSIFIERS: &[&str] = &[
    "so",
    "really",
    "extremely",
    "absolutely",
    "totally",
    "honestly",
    "genuinely",
    "worst",
    "best",
    "incredibly",
    "seriously",
    "utterly",
    "completely",
    "truly",
    "very",
    "super",
    "massively",
    "hugely",
    "deeply",
    "desperately",
    "terribly",
    "awfully",
    "insanely",
    "such a",
    "so much",
];

/// Step 2 of intensity: a repetition or a repeated grievance.
const REPETITION: &[&str] = &[
    "again",
    "every time",
    "every single",
    "never",
    "always",
    "second time",
    "third time",
    "fourth time",
    "keeps",
    "kept",
    "still",
    "once more",
    "three times",
    "how many times",
];

/// Step 2 of intensity: insisting.
const INSISTING: &[&str] = &[
    "adamant",
    "insist*",
    "i mean it",
    "for the last time",
    "non-negotiable",
    "under no circumstances",
    "must",
];

/// Step 2 of intensity: a stated consequence for the writer.
const CONSEQUENCE: &[&str] = &[
    "quit",
    "quitting",
    "resign*",
    "lose money",
    "losing money",
    "lost money",
    "lost sleep",
    "losing sleep",
    "can't sleep",
    "couldn't sleep",
    "penalty",
    "fired",
    "evict*",
    "break up",
    "breaking up",
    "end things",
    "deadline",
    "or else",
];

/// Step 3 of intensity: a hedge or a passing mention.
const HEDGES: &[&str] = &[
    "a bit",
    "a little",
    "kind of",
    "kinda",
    "sort of",
    "sorta",
    "slightly",
    "maybe",
    "perhaps",
    "not a big deal",
    "no big deal",
    "somewhat",
    "a tad",
    "i guess",
    "might",
    "possibly",
    "if that's ok",
    "if possible",
    "mildly",
    "i suppose",
    "not sure",
    "probably",
    "ish",
];

const SWEARING: &[&str] = &[
    "fuck*", "shit*", "damn*", "bloody", "crap", "wtf", "hell", "bastard*", "bullshit", "pissed",
    "arse", "ass",
];

/// Step 1 of affect: the guide's feeling words, per affect.
const ANGRY: &[&str] = &[
    "angry",
    "annoyed",
    "annoying",
    "furious",
    "fed up",
    "irritated",
    "irritating",
    "disgusted",
    "sick of",
    "livid",
    "mad",
    "frustrat*",
    "pissed",
    "outraged",
    "resent*",
];
const SAD: &[&str] = &[
    "sad",
    "down",
    "gutted",
    "disappoint*",
    "lonely",
    "miss",
    "missed",
    "missing",
    "regret*",
    "grief",
    "grieving",
    "heartbroken",
    "upset",
    "cried",
    "crying",
    "depressed",
    "hurt",
];
const ANXIOUS: &[&str] = &[
    "worried",
    "worry",
    "worrying",
    "nervous",
    "scared",
    "afraid",
    "dreading",
    "dread",
    "panick*",
    "stressed",
    "stress",
    "anxious",
    "anxiety",
    "terrified",
    "uneasy",
    "on edge",
];
const CONFUSED: &[&str] = &[
    "confused",
    "confusing",
    "lost",
    "no idea",
    "doesn't make sense",
    "does not make sense",
    "don't understand",
    "don't get",
    "what does",
    "puzzled",
    "baffled",
    "unclear",
    "not sure what",
    "not sure how",
];
const HAPPY: &[&str] = &[
    "happy",
    "glad",
    "relieved",
    "proud",
    "grateful",
    "thankful",
    "excited",
    "love",
    "loved",
    "loving",
    "can't wait",
    "thrilled",
    "delighted",
    "pleased",
    "joy",
    "yay",
    "finally",
];
const NEGATION: &[&str] = &[
    "not", "no", "never", "don't", "didn't", "isn't", "wasn't", "won't",
];

/// The text's words, lower-cased, with curly apostrophes made straight;
/// a word is a run of letters, digits, apostrophes and inner hyphens.
fn words(text: &str) -> Vec<String> {
    text.replace(['\u{2019}', '\u{2018}'], "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `words` hold `phrase` (space-separated words; the last may end
/// in `*`, a prefix).
fn holds(words: &[String], phrase: &str) -> bool {
    let parts: Vec<&str> = phrase.split(' ').collect();
    if parts.is_empty() || parts.len() > words.len() {
        return false;
    }
    words.windows(parts.len()).any(|window| {
        window
            .iter()
            .zip(&parts)
            .all(|(w, p)| match p.strip_suffix('*') {
                Some(stem) => w.starts_with(stem),
                None => w == p,
            })
    })
}

fn any(words: &[String], list: &[&str]) -> f32 {
    if list.iter().any(|p| holds(words, p)) {
        1.0
    } else {
        0.0
    }
}

/// Whether `word` (as written) is in capitals: two or more letters, all
/// upper case.
fn capitalised(word: &str) -> bool {
    let letters: Vec<char> = word.chars().filter(|c| c.is_alphabetic()).collect();
    letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase())
}

/// The cues of `text`, in [`CUE_NAMES`] order, each in `[0, 1]`.
pub fn wording_cues(text: &str) -> [f32; CUES] {
    let w = words(text);
    let raw: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|s| !s.is_empty())
        .collect();
    // Capitals: a run of two or more capitalised words is shouting; one
    // capitalised word of three or more letters is emphasis (short ones
    // are mostly acronyms: "GP", "UK").
    let mut run = 0usize;
    let mut longest = 0usize;
    let mut single = false;
    for r in &raw {
        if capitalised(r) {
            run += 1;
            longest = longest.max(run);
            single |= r.chars().filter(|c| c.is_alphabetic()).count() >= 3;
        } else {
            run = 0;
        }
    }
    let doubled = ["!!", "??", "?!", "!?"].iter().any(|m| text.contains(m));
    let swearing = any(&w, SWEARING);
    let exclamations = text.matches('!').count();
    [
        any(&w, CRISIS),
        f32::from(longest >= 2),
        if swearing > 0.0 && doubled { 1.0 } else { 0.0 },
        f32::from(doubled),
        (exclamations.min(3) as f32) / 3.0,
        f32::from(single),
        any(&w, INTENSIFIERS),
        any(&w, REPETITION),
        any(&w, INSISTING),
        any(&w, CONSEQUENCE),
        any(&w, HEDGES),
        f32::from(text.contains('?')),
        swearing,
        any(&w, ANGRY),
        any(&w, SAD),
        any(&w, ANXIOUS),
        any(&w, CONFUSED),
        any(&w, HAPPY),
        any(&w, NEGATION),
        (w.len().min(200) as f32) / 200.0,
    ]
}

/// `x` with each row's text's [`wording_cues`] appended (`dim + CUES`
/// wide). Errors when `texts` and the rows differ in number.
pub fn with_cues(x: &Rows, texts: &[&str]) -> Result<Rows, Error> {
    if texts.len() != x.len() {
        return Err(Error::InvalidOptions {
            reason: format!(
                "wording cues: {} texts for {} embedding rows",
                texts.len(),
                x.len()
            ),
        });
    }
    let mut data = Vec::with_capacity(x.len() * (x.dim() + CUES));
    for (row, text) in x.iter().zip(texts) {
        data.extend_from_slice(row);
        data.extend_from_slice(&wording_cues(text));
    }
    Rows::new(data, x.dim() + CUES)
}

/// `x` as a head reads it: with the cues appended when `cues`, else as is.
pub fn head_input<'a>(x: &'a Rows, texts: &[&str], cues: bool) -> Result<Cow<'a, Rows>, Error> {
    Ok(if cues {
        Cow::Owned(with_cues(x, texts)?)
    } else {
        Cow::Borrowed(x)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cue(text: &str, name: &str) -> f32 {
        let at = CUE_NAMES.iter().position(|n| *n == name).unwrap();
        wording_cues(text)[at]
    }

    #[test]
    fn each_intensity_step_has_its_cue() {
        assert_eq!(cue("I can't take it anymore.", "crisis"), 1.0);
        assert_eq!(cue("DO NOT message me after 9.", "shouting"), 1.0);
        assert_eq!(cue("Do NOT message me.", "shouting"), 0.0);
        assert_eq!(cue("Do NOT message me.", "capitalised_word"), 1.0);
        assert_eq!(cue("Ask the GP on Monday.", "capitalised_word"), 0.0);
        assert_eq!(cue("what the hell!!", "swearing_doubled_mark"), 1.0);
        assert_eq!(cue("what the hell!", "swearing_doubled_mark"), 0.0);
        assert_eq!(cue("Late again.", "repetition"), 1.0);
        assert_eq!(cue("I'm a bit worried.", "hedge"), 1.0);
        assert_eq!(cue("I\u{2019}m kinda tired", "hedge"), 1.0);
        assert_eq!(cue("Honestly the worst week.", "intensifier"), 1.0);
        assert_eq!(cue("She insisted on it.", "insisting"), 1.0);
        assert_eq!(cue("Great!", "exclamation"), 1.0 / 3.0);
        assert_eq!(cue("Great!!!!!", "exclamation"), 1.0);
    }

    #[test]
    fn feeling_words_and_stems_match_whole_words_only() {
        assert_eq!(cue("So frustrating.", "feeling_angry"), 1.0);
        assert_eq!(cue("I'm gutted.", "feeling_sad"), 1.0);
        assert_eq!(cue("dreading Thursday", "feeling_anxious"), 1.0);
        assert_eq!(cue("No idea what this means", "feeling_confused"), 1.0);
        assert_eq!(cue("Can't wait for June", "feeling_happy"), 1.0);
        // "madness" is not "mad"; "missionary" is not "miss".
        assert_eq!(cue("Such madness", "feeling_angry"), 0.0);
        assert_eq!(cue("a missionary", "feeling_sad"), 0.0);
    }

    #[test]
    fn a_flat_line_has_no_emphasis_cue_and_every_cue_is_in_range() {
        let flat = wording_cues("Dentist moved to Tuesday at 10.");
        for name in ["crisis", "shouting", "exclamation", "intensifier", "hedge"] {
            assert_eq!(
                flat[CUE_NAMES.iter().position(|n| *n == name).unwrap()],
                0.0
            );
        }
        let long = "word ".repeat(500);
        for text in ["", "!!!!??", long.as_str(), "ÉTÉ ÇA VA"] {
            assert!(wording_cues(text).iter().all(|c| (0.0..=1.0).contains(c)));
        }
        assert_eq!(cue("ÉTÉ ÇA VA", "shouting"), 1.0);
    }

    #[test]
    fn with_cues_appends_one_block_per_row_and_checks_the_count() {
        let x = Rows::new(vec![0.5, -0.5, 1.0, 0.0], 2).unwrap();
        let y = with_cues(&x, &["Great!", "fine"]).unwrap();
        assert_eq!((y.len(), y.dim()), (2, 2 + CUES));
        assert_eq!(&y.row(0)[..2], &[0.5, -0.5]);
        assert_eq!(&y.row(0)[2..], &wording_cues("Great!"));
        assert!(with_cues(&x, &["one"]).is_err());
        assert!(matches!(
            head_input(&x, &[], false).unwrap(),
            Cow::Borrowed(_)
        ));
    }
}
