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
    let bytes = text.as_bytes();
    let mut cuts = Vec::new(); // byte positions where a new sentence starts
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (pos, c) = chars[i];
        if c == '\n' {
            // Blank line, list item, or end of a punctuated or capitalised line.
            let line_start = text[..pos].rfind('\n').map_or(0, |p| p + 1);
            let line = text[line_start..pos].trim_end();
            let rest = &text[pos + 1..];
            let next_line = rest.split('\n').next().unwrap_or("");
            let next = next_line.trim_start();
            let blank = next.is_empty();
            let ends_punct = line.ends_with(['.', '!', '?', '…', ':', ';']);
            let next_starts_upper = next
                .chars()
                .next()
                .is_some_and(|c| c.is_uppercase() || c.is_ascii_digit());
            if blank
                || ends_punct
                || is_list_item(next)
                || is_list_item(line.trim_start())
                || next_starts_upper
                || line.is_empty()
            {
                cuts.push(pos + 1);
            }
            i += 1;
            continue;
        }
        if matches!(c, '.' | '!' | '?' | '…') {
            // The whole run of terminal punctuation and closing marks.
            let mut j = i;
            while j < chars.len() && matches!(chars[j].1, '.' | '!' | '?' | '…') {
                j += 1;
            }
            let run = &text[pos..chars.get(j).map_or(text.len(), |c| c.0)];
            while j < chars.len() && matches!(chars[j].1, '"' | '\'' | '”' | '’' | ')' | ']' | '»')
            {
                j += 1;
            }
            if j >= chars.len() {
                break;
            }
            if !chars[j].1.is_whitespace() {
                i = j;
                continue;
            }
            // Next non-space character.
            let mut k = j;
            while k < chars.len() && chars[k].1.is_whitespace() && chars[k].1 != '\n' {
                k += 1;
            }
            if k >= chars.len() || chars[k].1 == '\n' {
                // The newline rule decides; a trailing punctuation run ends the line anyway.
                i = k;
                continue;
            }
            let next = chars[k].1;
            let opens_next = next.is_uppercase()
                || next.is_ascii_digit()
                || matches!(
                    next,
                    '"' | '\'' | '“' | '‘' | '(' | '[' | '«' | '-' | '*' | '•'
                )
                || !next.is_alphabetic();
            let is_period = run == ".";
            let is_ellipsis = run == "…" || run.chars().filter(|&c| c == '.').count() >= 3;
            let mut boundary = opens_next;
            if is_period && boundary {
                let word = word_before(text, pos);
                let lw = word.to_lowercase().replace('.', "");
                let initial = word.chars().count() == 1 && word.chars().all(|c| c.is_uppercase());
                if ABBREVIATIONS.contains(&lw.as_str()) || initial {
                    boundary = false;
                }
            }
            if is_ellipsis && !next.is_uppercase() {
                boundary = false;
            }
            if boundary {
                cuts.push(chars[k].0);
            }
            i = k;
            continue;
        }
        i += 1;
    }
    // List markers at line starts also start a sentence.
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if is_list_item(trimmed) {
            cuts.push(line_start + (line.len() - trimmed.len()));
        }
        line_start += line.len();
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut spans = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain(std::iter::once(bytes.len())) {
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
    let s = &text[start..end];
    let lead = s.len() - s.trim_start().len();
    let t = s.trim();
    (!t.is_empty()).then(|| (start + lead, start + lead + t.len()))
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
}
