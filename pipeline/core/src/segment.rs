//! Sentence segmentation with byte offsets: the source anchors that quotes
//! are cut from.
//!
//! Rules, in the spirit of UAX #29's sentence boundaries but tuned for
//! journals and session notes:
//! - `.`, `!`, `?`, `…` (and runs like `?!` or `...`), with any closing
//!   quotes or brackets, end a sentence when whitespace and then an
//!   upper-case letter, digit, opening quote/bracket or the end follow;
//! - not after titles and common abbreviations (`Dr.`, `e.g.`, `a.m.`) or
//!   single initials (`J. R. R.`), not inside numbers (`3.5`, `v1.2`) or
//!   names (`example.com`: no whitespace follows);
//! - an ellipsis followed by a lower-case word does not end a sentence;
//! - a blank line always ends one; a single newline ends one when the line
//!   ends in terminal punctuation, when the next line is a list item, or when
//!   the next line starts with a capital (journals without punctuation);
//!   hard-wrapped prose (next line starts lower-case) is joined;
//! - list markers (`- `, `* `, `• `, `1. `, `2) `) start a new sentence.
//!
//! Spans are trimmed of surrounding whitespace and never empty; every span is
//! a valid `&text[start..end]`.

/// Abbreviations after which a period does not end a sentence (lower-case,
/// without their periods).
const ABBREVIATIONS: &[&str] = &[
    "dr", "mr", "mrs", "ms", "mx", "prof", "sr", "jr", "st", "mt", "rev", "gen", "col", "lt",
    "sgt", "capt", "vs", "etc", "eg", "ie", "cf", "al", "approx", "dept", "est", "fig", "inc",
    "ltd", "co", "corp", "no", "vol", "ch", "sec", "am", "pm", "jan", "feb", "mar", "apr", "jun",
    "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon", "tue", "tues", "wed", "thu", "thurs",
    "fri", "sat", "sun", "ave", "rd", "blvd",
];

/// Splits `text` into sentence spans `(start, end)` in bytes.
pub fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut cuts = Vec::new(); // byte positions where a new sentence starts
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut index = 0;
    while index < chars.len() {
        let (pos, character) = chars[index];
        if character == '\n' {
            if newline_ends_sentence(text, pos) {
                cuts.push(pos + 1);
            }
            index += 1;
        } else if is_terminal(character) {
            match after_terminal_run(text, &chars, index, &mut cuts) {
                Some(resume) => index = resume,
                None => break,
            }
        } else {
            index += 1;
        }
    }
    push_list_item_starts(text, &mut cuts);
    cuts.sort_unstable();
    cuts.dedup();
    spans_between(text, cuts)
}

/// A sentence of more words than this is cut into passages
/// ([`passages`]): a run-on voice transcript or an unpunctuated ramble is
/// one "sentence" of a hundred words, which would make the whole text the
/// quote and dilute a short line in it (a sensitive aside in a grocery
/// list) among everything around it.
pub const LONG_SENTENCE_WORDS: usize = 40;
/// A passage cut from a long sentence has at least this many words...
const PASSAGE_MIN_WORDS: usize = 8;
/// ...and at most this many.
const PASSAGE_MAX_WORDS: usize = 25;

/// The spans the classifier scores and quotes: the [`sentences`], each one
/// longer than [`LONG_SENTENCE_WORDS`] words cut into passages of
/// 8 to 25 words at its clause boundaries (after `,` `;` `:`, before a
/// dash, before a filler such as "um" or "anyway", before "and" or "but";
/// the latest of the strongest boundaries in reach). Spans are verbatim,
/// trimmed and in text order, like the sentences'.
pub fn passages(text: &str) -> Vec<(usize, usize)> {
    passages_of(text, &sentences(text))
}

/// [`passages`] from `text`'s [`sentences`], for a caller that needs both.
pub fn passages_of(text: &str, sentences: &[(usize, usize)]) -> Vec<(usize, usize)> {
    sentences
        .iter()
        .flat_map(|&span| cut_long_sentence(text, span))
        .collect()
}

/// `span` itself, or its passages when it has more than
/// [`LONG_SENTENCE_WORDS`] words.
fn cut_long_sentence(text: &str, (start, end): (usize, usize)) -> Vec<(usize, usize)> {
    let sentence = &text[start..end];
    let words: Vec<(usize, usize)> = sentence
        .split_whitespace()
        .map(|w| {
            let at = w.as_ptr() as usize - sentence.as_ptr() as usize;
            (start + at, start + at + w.len())
        })
        .collect();
    if words.len() <= LONG_SENTENCE_WORDS {
        return vec![(start, end)];
    }
    let mut out = Vec::new();
    let mut first = 0;
    while words.len() - first > PASSAGE_MAX_WORDS {
        // Cut before word `j`; the rest keeps at least the minimum.
        let last_cut = (first + PASSAGE_MAX_WORDS).min(words.len() - PASSAGE_MIN_WORDS);
        let cut = (first + PASSAGE_MIN_WORDS..=last_cut)
            .max_by_key(|&j| (boundary_strength(text, words[j - 1], words[j]), j))
            .unwrap_or(last_cut);
        out.push((words[first].0, words[cut - 1].1));
        first = cut;
    }
    out.push((words[first].0, end));
    out
}

/// How good a place the gap between the words `before` and `after` is to
/// cut a long sentence: 3 after a clause mark or before a dash, 2 before a
/// filler or discourse marker, 1 before a conjunction, else 0.
fn boundary_strength(text: &str, before: (usize, usize), after: (usize, usize)) -> u8 {
    let before = &text[before.0..before.1];
    let after = &text[after.0..after.1];
    if before.ends_with([',', ';', ':', '—', '–']) || after.starts_with(['—', '–', '-']) {
        return 3;
    }
    let word: String = after
        .chars()
        .filter(|c| c.is_alphabetic())
        .collect::<String>()
        .to_lowercase();
    match word.as_str() {
        "um" | "umm" | "uh" | "uhh" | "erm" | "er" | "hmm" | "okay" | "ok" | "anyway"
        | "anyways" | "also" | "so" | "oh" | "well" | "yeah" | "plus" | "lol" => 2,
        "and" | "but" | "because" | "cause" | "cos" | "then" | "which" | "while" | "though"
        | "although" => 1,
        _ => 0,
    }
}

/// Terminal punctuation: a run of these may end a sentence.
fn is_terminal(character: char) -> bool {
    matches!(character, '.' | '!' | '?' | '…')
}

/// The newline at byte `pos` ends a sentence: a blank line, a list item,
/// or the end of a punctuated or capitalised line.
fn newline_ends_sentence(text: &str, pos: usize) -> bool {
    let line_start = text[..pos].rfind('\n').map_or(0, |newline| newline + 1);
    let line = text[line_start..pos].trim_end();
    let rest = &text[pos + 1..];
    let next_line = rest.split('\n').next().unwrap_or("");
    let next = next_line.trim_start();
    let blank = next.is_empty();
    let ends_punct = line.ends_with(['.', '!', '?', '…', ':', ';']);
    let next_starts_upper = next
        .chars()
        .next()
        .is_some_and(|first| first.is_uppercase() || first.is_ascii_digit());
    blank
        || ends_punct
        || is_list_item(next)
        || is_list_item(line.trim_start())
        || next_starts_upper
        || line.is_empty()
}

/// Reads the run of terminal punctuation (and closing marks) that starts at
/// `chars[start]` and pushes the next sentence's start to `cuts` when the
/// run ends one. Returns the index where scanning resumes; `None` when the
/// run closes the text.
fn after_terminal_run(
    text: &str,
    chars: &[(usize, char)],
    start: usize,
    cuts: &mut Vec<usize>,
) -> Option<usize> {
    let pos = chars[start].0;
    let mut after = start;
    while after < chars.len() && is_terminal(chars[after].1) {
        after += 1;
    }
    let run = &text[pos..chars.get(after).map_or(text.len(), |(byte, _)| *byte)];
    while after < chars.len() && matches!(chars[after].1, '"' | '\'' | '”' | '’' | ')' | ']' | '»')
    {
        after += 1;
    }
    if after >= chars.len() {
        return None;
    }
    if !chars[after].1.is_whitespace() {
        return Some(after);
    }
    // Next non-space character.
    let mut next_index = after;
    while next_index < chars.len()
        && chars[next_index].1.is_whitespace()
        && chars[next_index].1 != '\n'
    {
        next_index += 1;
    }
    if next_index >= chars.len() || chars[next_index].1 == '\n' {
        // The newline rule decides; a trailing punctuation run ends the line anyway.
        return Some(next_index);
    }
    let (next_pos, next) = chars[next_index];
    if run_ends_sentence(text, pos, run, next) {
        cuts.push(next_pos);
    }
    Some(next_index)
}

/// Whether the punctuation `run` at byte `pos`, followed by whitespace and
/// then `next`, ends a sentence.
fn run_ends_sentence(text: &str, pos: usize, run: &str, next: char) -> bool {
    let opens_next = next.is_uppercase()
        || next.is_ascii_digit()
        || matches!(
            next,
            '"' | '\'' | '“' | '‘' | '(' | '[' | '«' | '-' | '*' | '•'
        )
        || !next.is_alphabetic();
    if !opens_next {
        return false;
    }
    let is_ellipsis = run == "…" || run.chars().filter(|&mark| mark == '.').count() >= 3;
    if is_ellipsis && !next.is_uppercase() {
        return false;
    }
    !(run == "." && ends_abbreviation_or_initial(text, pos))
}

/// The period at byte `pos` closes an abbreviation (`Dr.`, `e.g.`) or a
/// single initial (`J.`).
fn ends_abbreviation_or_initial(text: &str, pos: usize) -> bool {
    let word = word_before(text, pos);
    let folded = word.to_lowercase().replace('.', "");
    let initial = word.chars().count() == 1 && word.chars().all(char::is_uppercase);
    ABBREVIATIONS.contains(&folded.as_str()) || initial
}

/// List markers at line starts also start a sentence.
fn push_list_item_starts(text: &str, cuts: &mut Vec<usize>) {
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if is_list_item(trimmed) {
            cuts.push(line_start + (line.len() - trimmed.len()));
        }
        line_start += line.len();
    }
}

/// The trimmed, non-empty spans between sorted `cuts` and the end of `text`.
fn spans_between(text: &str, cuts: Vec<usize>) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain(std::iter::once(text.len())) {
        if cut <= start {
            continue;
        }
        if let Some(span) = trim(text, start, cut) {
            spans.push(span);
        }
        start = cut;
    }
    spans
}

fn trim(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let span = &text[start..end];
    let lead = span.len() - span.trim_start().len();
    let trimmed = span.trim();
    (!trimmed.is_empty()).then(|| (start + lead, start + lead + trimmed.len()))
}

/// The word (letters and inner periods) right before byte `pos`.
fn word_before(text: &str, pos: usize) -> &str {
    let before = &text[..pos];
    let start = before
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    &before[start..]
}

fn is_list_item(line: &str) -> bool {
    if let Some(rest) = line.strip_prefix(['-', '*', '•', '–']) {
        return rest.starts_with(' ');
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && digits <= 3 && {
        let rest = &line[digits..];
        (rest.starts_with(". ") || rest.starts_with(") ")) && rest.len() > 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<&str> {
        sentences(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    #[test]
    fn plain_sentences() {
        assert_eq!(
            split("Keep answers short. Put the code first! Why not? Ok."),
            [
                "Keep answers short.",
                "Put the code first!",
                "Why not?",
                "Ok."
            ]
        );
    }

    #[test]
    fn titles_initials_and_abbreviations_do_not_split() {
        assert_eq!(
            split(
                "Saw Dr. Okafor at 9 a.m. today. J. R. Tolkien is her favourite, e.g. The Hobbit. Fine."
            ),
            [
                "Saw Dr. Okafor at 9 a.m. today.",
                "J. R. Tolkien is her favourite, e.g. The Hobbit.",
                "Fine."
            ]
        );
    }

    #[test]
    fn decimals_versions_and_domains_do_not_split() {
        assert_eq!(
            split("The fee rose 3.5 percent on v1.2.3 of example.com today. Next."),
            [
                "The fee rose 3.5 percent on v1.2.3 of example.com today.",
                "Next."
            ]
        );
    }

    #[test]
    fn ellipses_split_only_before_a_capital() {
        assert_eq!(
            split("I guess... maybe later. Then silence… Nobody called."),
            ["I guess... maybe later.", "Then silence…", "Nobody called."]
        );
    }

    #[test]
    fn lists_and_unpunctuated_journal_lines() {
        let t = "todo today\n- call Sam back\n- book the dentist\n1. pay rent\nfeeling tired\nwrapped line that\ncontinues here";
        assert_eq!(
            split(t),
            [
                "todo today",
                "- call Sam back",
                "- book the dentist",
                "1. pay rent",
                "feeling tired\nwrapped line that\ncontinues here"
            ]
        );
    }

    #[test]
    fn quotes_close_with_their_sentence_and_offsets_are_bytes() {
        let t = "She said “stop.” Then — café — we left!";
        let spans = sentences(t);
        assert_eq!(split(t), ["She said “stop.”", "Then — café — we left!"]);
        let (s, e) = spans[1];
        assert_eq!(&t.as_bytes()[s..e], "Then — café — we left!".as_bytes());
    }

    #[test]
    fn blank_lines_and_whitespace_only() {
        assert_eq!(
            split("First part\n\nsecond part"),
            ["First part", "second part"]
        );
        assert!(split("   \n\n ").is_empty());
        assert_eq!(split("no punctuation at all"), ["no punctuation at all"]);
    }
    fn cut(text: &str) -> Vec<&str> {
        passages(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    #[test]
    fn short_sentences_are_their_own_passages() {
        let t = "Keep answers short. Put the code first, then the prose, and say why.";
        assert_eq!(cut(t), split(t));
    }

    #[test]
    fn a_run_on_transcript_is_cut_at_its_fillers_and_clause_marks() {
        let t = "okay so grocery list eggs oat milk the good bread um bin bags and that descaler thing for the kettle uh and remind me to email Fran about the book club pick I vote for the Ishiguro one um I don't know I keep lying in bed till two in the afternoon and nothing feels like anything, it's like the colour's gone out of everything and uh yeah also batteries for the smoke alarm";
        let parts = cut(t);
        assert_eq!(
            parts,
            [
                "okay so grocery list eggs oat milk the good bread um bin bags and that descaler thing for the kettle",
                "uh and remind me to email Fran about the book club pick I vote for the Ishiguro one",
                "um I don't know I keep lying in bed till two in the afternoon and nothing feels like anything,",
                "it's like the colour's gone out of everything and uh yeah also batteries for the smoke alarm",
            ]
        );
        for p in &parts {
            let n = p.split_whitespace().count();
            assert!(
                (PASSAGE_MIN_WORDS..=PASSAGE_MAX_WORDS).contains(&n),
                "{n} words: {p}"
            );
        }
    }

    #[test]
    fn a_long_sentence_without_boundaries_is_cut_by_length_and_offsets_are_bytes() {
        let words: Vec<String> = (0..60).map(|i| format!("mot{i}é")).collect();
        let t = format!("Début.\n\n{}", words.join(" "));
        let spans = passages(&t);
        assert_eq!(&t[spans[0].0..spans[0].1], "Début.");
        let rest: Vec<&str> = spans[1..].iter().map(|&(s, e)| &t[s..e]).collect();
        assert_eq!(rest.len(), 3, "{rest:?}");
        assert!(
            rest.iter()
                .all(|p| p.split_whitespace().count() <= PASSAGE_MAX_WORDS)
        );
        assert_eq!(rest.join(" "), words.join(" "));
    }
}
