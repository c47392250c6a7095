//! Mentions in record text: names and aliases of registry nodes (linked to
//! their node), and person-like names that are not in the registry
//! (candidates for the curator's unknown-node queue).
//!
//! Linking rules ([`Linker::link`]):
//! - one Aho-Corasick automaton over every name and alias of the registry,
//!   built once per run (in time linear in the registry) and run over every
//!   record of the batch;
//! - case-insensitive (Unicode lower-casing wherever it keeps a character's
//!   byte length, so offsets into the folded text are offsets into the
//!   text), with whether the case matched kept for the link's confidence;
//! - whole words only: the characters around a match are not letters,
//!   digits, `_`, or a hyphen that joins another word (`Samantha` is not
//!   `Sam`, `kestrel-bot` is not `Kestrel`); a possessive (`Sam's`,
//!   `Sam’s`, `James'`) ends a word;
//! - longest match first: of overlapping matches the longest wins (`Sam
//!   Patel` over `Sam`), then the leftmost.
//!
//! Unknown candidates ([`candidates`]) are found by shape, then scored by
//! the classifier's person head on their words read in context:
//! - `@handles` (agents and bots);
//! - a title or kinship word followed by capitalised words (`Dr. Okafor`,
//!   `Aunt Rosa`, `Farmor Ingrid`), or a capitalised kinship word alone
//!   (`Mum`, `Oma`);
//! - runs of capitalised words (`Priya`, `Sofia Reyes`).
//!
//! Never candidates: weekdays, months, holidays, `I` and its contractions,
//! pronouns and other function words, acronyms (`CI`, `AWS`), words with
//! digits, words with inner capitals (`GitHub`, `PostgreSQL`; `McKenzie`
//! and `O'Brien` still count), and anything that overlaps a linked mention.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use foldhash::{HashSet, HashSetExt};

use crate::graph::nodes::{Node, Registry};

/// A registry name or alias found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linked {
    /// Start byte in the text.
    pub start: usize,
    /// End byte (exclusive); a possessive suffix is not included.
    pub end: usize,
    /// Index of the node in [`Linker::nodes`].
    pub node: usize,
    /// Whether the text has the registry's own capitalisation.
    pub exact_case: bool,
}

/// The automaton over a registry's names and aliases.
#[derive(Debug, Clone)]
pub struct Linker {
    ac: Option<AhoCorasick>,
    /// Per pattern: node index and the name as the registry writes it.
    patterns: Vec<(usize, String)>,
    nodes: Vec<Node>,
}

/// Lower-cases `s` character by character wherever the lower-case form has
/// the same UTF-8 length, so byte offsets carry over unchanged.
pub fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let mut lower = c.to_lowercase();
        match (lower.next(), lower.next()) {
            (Some(l), None) if l.len_utf8() == c.len_utf8() => out.push(l),
            _ => out.push(c),
        }
    }
    out
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `[start, end)` of `text` stands as whole words: not touching a
/// letter, digit or `_`, nor a hyphen, dot or slash that joins another word
/// (`kestrel-botnet`, `sam.patel`, `github.com/sam`), nor the `@` of an
/// e-mail address (`sam@example.com`; a handle `@sam` still links).
fn whole_word(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().rev().take(2).collect::<Vec<_>>();
    let after = text[end..].chars().take(2).collect::<Vec<_>>();
    let joins = |x: &[char]| match x {
        [c, ..] if is_word_char(*c) || *c == '/' => true,
        ['-' | '.', c, ..] => is_word_char(*c),
        _ => false,
    };
    !joins(&before) && !joins(&after) && after.first() != Some(&'@')
}

impl Linker {
    /// Builds the automaton over every name and alias of `registry`.
    pub fn new(registry: &Registry) -> Self {
        let nodes = registry.nodes().to_vec();
        let mut patterns = Vec::new();
        // A node's own names, to skip one it lists twice: linear in the
        // registry (no pattern is compared with another node's).
        let mut own: HashSet<&str> = HashSet::new();
        for (i, n) in nodes.iter().enumerate() {
            own.clear();
            for name in std::iter::once(&n.name).chain(&n.aliases) {
                let name = name.trim();
                if !name.is_empty() && own.insert(name) {
                    patterns.push((i, name.to_string()));
                }
            }
        }
        let ac = (!patterns.is_empty()).then(|| {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::Standard)
                .build(patterns.iter().map(|(_, p)| fold(p)))
                .expect("registry names are valid patterns")
        });
        Self {
            ac,
            patterns,
            nodes,
        }
    }

    /// The registry's nodes; [`Linked::node`] indexes them.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Registry mentions in `text`, in text order, none overlapping.
    pub fn link(&self, text: &str) -> Vec<Linked> {
        let Some(ac) = &self.ac else {
            return Vec::new();
        };
        let folded = fold(text);
        debug_assert_eq!(folded.len(), text.len());
        let mut found: Vec<(usize, usize, usize)> = ac
            .find_overlapping_iter(&folded)
            .map(|m| (m.start(), m.end(), m.pattern().as_usize()))
            .filter(|&(s, e, _)| {
                text.is_char_boundary(s) && text.is_char_boundary(e) && whole_word(text, s, e)
            })
            .collect();
        // Longest first, then leftmost; a match is kept when it overlaps
        // none kept before it.
        found.sort_by_key(|&(s, e, p)| (std::cmp::Reverse(e - s), s, p));
        let mut kept: Vec<Linked> = Vec::new();
        for (s, e, p) in found {
            if kept.iter().any(|k| s < k.end && k.start < e) {
                continue;
            }
            let (node, name) = &self.patterns[p];
            kept.push(Linked {
                start: s,
                end: e,
                node: *node,
                exact_case: &text[s..e] == name,
            });
        }
        kept.sort_by_key(|k| k.start);
        kept
    }
}

/// Why a span looks like a person or agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cue {
    /// `@name`.
    Handle,
    /// A title or kinship word and a name (`Dr. Okafor`, `Aunt Rosa`).
    Title,
    /// A capitalised kinship word alone (`Mum`).
    Kinship,
    /// Capitalised words.
    Name,
}

/// A person-like span that no registry name covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Start byte.
    pub start: usize,
    /// End byte (exclusive), without a possessive suffix.
    pub end: usize,
    /// Its shape.
    pub cue: Cue,
    /// It starts its sentence (where any word is capitalised).
    pub sentence_initial: bool,
    /// More than one word.
    pub multiword: bool,
    /// Followed by a possessive (`'s`).
    pub possessive: bool,
}

/// Number of [`Candidate::features`].
pub const CANDIDATE_FEATURES: usize = 6;

impl Candidate {
    /// Shape features the person head reads next to the span's embedding.
    pub fn features(&self) -> [f32; CANDIDATE_FEATURES] {
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        [
            b(self.sentence_initial),
            b(self.cue == Cue::Handle),
            b(self.cue == Cue::Title),
            b(self.cue == Cue::Kinship),
            b(self.multiword),
            b(self.possessive),
        ]
    }
}

/// Titles and kinship words that take a name after them (lower-case, no period).
const TITLES: &[&str] = &[
    "dr",
    "doctor",
    "mr",
    "mrs",
    "ms",
    "mx",
    "miss",
    "prof",
    "professor",
    "aunt",
    "auntie",
    "aunty",
    "uncle",
    "grandma",
    "grandpa",
    "granny",
    "grandad",
    "grandmother",
    "grandfather",
    "sister",
    "brother",
    "father",
    "mother",
    "fr",
    "sr",
    "frau",
    "herr",
    "coach",
    "nurse",
    "officer",
    "pastor",
    "rabbi",
    "imam",
    "judge",
    "captain",
    "capt",
    "sir",
    "lady",
    "madame",
    "monsieur",
    "señor",
    "señora",
    "senhor",
    "senhora",
    "tia",
    "tía",
    "tio",
    "tío",
    "tante",
    "onkel",
    "oma",
    "opa",
    "nonna",
    "nonno",
    "abuela",
    "abuelo",
    "avó",
    "avô",
    "farmor",
    "farfar",
    "mormor",
    "morfar",
    "cousin",
    "baba",
    "nana",
];

/// Kinship words that name a person on their own when capitalised.
const KINSHIP: &[&str] = &[
    "mum", "mom", "mam", "mummy", "mommy", "dad", "daddy", "mama", "papa", "mamá", "papá", "oma",
    "opa", "grandma", "grandpa", "granny", "grandad", "gran", "nana", "nan", "abuela", "abuelo",
    "avó", "avô", "nonna", "nonno", "farmor", "farfar", "mormor", "morfar", "baba", "auntie",
];

/// Capitalised words that are never people.
const NEVER: &[&str] = &[
    // calendar
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "mon",
    "tue",
    "tues",
    "wed",
    "thu",
    "thurs",
    "fri",
    "sat",
    "sun",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
    "christmas",
    "easter",
    "eid",
    "diwali",
    "hanukkah",
    "ramadan",
    "thanksgiving",
    "halloween",
    "today",
    "tomorrow",
    "yesterday",
    "tonight",
    "weekend",
    // I and function words
    "i",
    "i'm",
    "i've",
    "i'll",
    "i'd",
    "i’m",
    "i’ve",
    "i’ll",
    "i’d",
    "he",
    "she",
    "they",
    "we",
    "you",
    "it",
    "me",
    "him",
    "her",
    "them",
    "us",
    "my",
    "our",
    "your",
    "his",
    "their",
    "its",
    "this",
    "that",
    "these",
    "those",
    "the",
    "a",
    "an",
    "and",
    "but",
    "or",
    "so",
    "if",
    "when",
    "then",
    "also",
    "just",
    "still",
    "not",
    "no",
    "yes",
    "ok",
    "okay",
    "oh",
    "ah",
    "um",
    "hey",
    "hi",
    "hello",
    "thanks",
    "please",
    "sorry",
    "well",
    "maybe",
    "anyway",
    "honestly",
    "today's",
    "user",
    "assistant",
    "agent",
    "persona",
    "session",
    "summary",
    "note",
    "notes",
    "update",
    "todo",
    "re",
    "fyi",
    "ps",
    "on",
    "in",
    "at",
    "for",
    "with",
    "from",
    "to",
    "by",
    "of",
    "after",
    "before",
    "during",
    "since",
    "until",
    "about",
    "over",
    "under",
    "between",
    "because",
    "while",
    "although",
    "though",
    "as",
    "than",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "where",
    "why",
    "how",
    "there",
    "here",
    "every",
    "each",
    "some",
    "any",
    "all",
    "both",
    "most",
    "many",
    "much",
    "more",
    "less",
    "few",
    "none",
    "nothing",
    "something",
    "everything",
    "everyone",
    "someone",
    "nobody",
    "somebody",
    "nope",
    "yeah",
    "yep",
    "wow",
    "ugh",
    "lol",
];

struct Word {
    start: usize,
    /// End of the word without a possessive suffix.
    end: usize,
    possessive: bool,
    /// Ends with a period (`Dr.`).
    period: bool,
}

/// Words of `text`: letters, digits, inner apostrophes and hyphens.
fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        if !is_word_char(chars[i].1) {
            i += 1;
            continue;
        }
        let start = chars[i].0;
        let mut j = i;
        while j < chars.len() {
            let c = chars[j].1;
            let inner = matches!(c, '\'' | '’' | '-')
                && chars.get(j + 1).is_some_and(|n| is_word_char(n.1))
                && j > i;
            if is_word_char(c) || inner {
                j += 1;
            } else {
                break;
            }
        }
        let end_all = chars.get(j).map_or(text.len(), |c| c.0);
        let w = &text[start..end_all];
        let (end, possessive) = if let Some(stem) = w
            .strip_suffix("'s")
            .or_else(|| w.strip_suffix("’s"))
            .filter(|s| !s.is_empty())
        {
            (start + stem.len(), true)
        } else if chars.get(j).is_some_and(|c| matches!(c.1, '\'' | '’')) && w.ends_with(['s', 'S'])
        {
            (end_all, true)
        } else {
            (end_all, false)
        };
        let period = chars.get(j).is_some_and(|c| c.1 == '.');
        out.push(Word {
            start,
            end,
            possessive,
            period,
        });
        i = j;
    }
    out
}

fn capitalised(w: &str) -> bool {
    let mut cs = w.chars();
    let Some(first) = cs.next() else {
        return false;
    };
    if !first.is_uppercase() || w.chars().any(|c| c.is_ascii_digit()) {
        return false;
    }
    // A contraction (`He'll`, `Don't`) is no name; `O'Brien` is.
    let cs: Vec<char> = w.chars().collect();
    if cs
        .windows(2)
        .any(|p| matches!(p[0], '\'' | '’') && p[1].is_lowercase())
    {
        return false;
    }
    let letters: Vec<char> = w.chars().filter(|c| c.is_alphabetic()).collect();
    if letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase()) {
        return false; // an acronym
    }
    // Inner capitals only after Mc/Mac, an apostrophe or a hyphen.
    let chars: Vec<char> = w.chars().collect();
    for k in 1..chars.len() {
        if chars[k].is_uppercase() {
            let prev = chars[k - 1];
            let prefix: String = chars[..k].iter().collect();
            if !(matches!(prev, '\'' | '’' | '-') || prefix == "Mc" || prefix == "Mac") {
                return false;
            }
        }
    }
    true
}

/// Person-like spans of `text` that overlap none of `taken`, in text order.
/// `sentences` are the text's sentence spans (for sentence-initial words).
pub fn candidates(
    text: &str,
    sentences: &[(usize, usize)],
    taken: &[(usize, usize)],
) -> Vec<Candidate> {
    let scan = CandidateScan {
        text,
        words: words(text),
        sentences,
        taken,
    };
    let mut out = Vec::new();
    let mut index = 0;
    while index < scan.words.len() {
        let word = &scan.words[index];
        if word.start > 0 && text[..word.start].ends_with('@') {
            out.extend(scan.handle(word));
            index += 1;
            continue;
        }
        if !capitalised(&text[word.start..word.end]) {
            index += 1;
            continue;
        }
        let (candidate, last) = scan.name_at(index);
        out.extend(candidate);
        index = last + 1;
    }
    out
}

/// The words of one text while [`candidates`] walks them.
struct CandidateScan<'a> {
    text: &'a str,
    words: Vec<Word>,
    sentences: &'a [(usize, usize)],
    /// Spans already linked: no candidate overlaps them.
    taken: &'a [(usize, usize)],
}

impl CandidateScan<'_> {
    /// The word, case-folded.
    fn folded(&self, word: &Word) -> String {
        fold(&self.text[word.start..word.end])
    }

    /// Whether `[start, end)` overlaps no taken span.
    fn is_free(&self, start: usize, end: usize) -> bool {
        !self
            .taken
            .iter()
            .any(|&(taken_start, taken_end)| start < taken_end && taken_start < end)
    }

    /// Whether only non-word characters precede `pos` in its sentence, or
    /// it follows a colon or an opening quote.
    fn starts_sentence(&self, pos: usize) -> bool {
        let text = self.text;
        self.sentences.iter().any(|&(start, end)| {
            start <= pos
                && pos < end
                && text[start..pos]
                    .chars()
                    .all(|c| !is_word_char(c) && c != '@')
        }) || text[..pos].trim_end().ends_with([':', '"', '“'])
    }

    /// The `@handle` whose word is `word` (the `@` just before it), unless
    /// the `@` follows a word character or the span is taken.
    fn handle(&self, word: &Word) -> Option<Candidate> {
        let at_sign = word.start - 1;
        let after_non_word = self.text[..at_sign]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word_char(c));
        (after_non_word && self.is_free(at_sign, word.end)).then_some(Candidate {
            start: at_sign,
            end: word.end,
            cue: Cue::Handle,
            sentence_initial: false,
            multiword: false,
            possessive: word.possessive,
        })
    }

    /// The name that starts at capitalised word `first`, and the index of
    /// its last word (`first` when there is no name).
    fn name_at(&self, first: usize) -> (Option<Candidate>, usize) {
        let word = &self.words[first];
        let folded = self.folded(word);
        let is_title = TITLES.contains(&folded.as_str());
        let last = self.name_run_end(first, is_title);
        let Some(cue) = name_cue(&folded, is_title, last > first) else {
            return (None, first);
        };
        // A sentence-initial function word before a name: drop the word.
        let (start, first) = if cue == Cue::Name && NEVER.contains(&folded.as_str()) {
            (self.words[first + 1].start, first + 1)
        } else {
            (word.start, first)
        };
        let last_word = &self.words[last];
        let candidate = self.is_free(start, last_word.end).then(|| Candidate {
            start,
            end: last_word.end,
            cue,
            sentence_initial: self.starts_sentence(start),
            multiword: last > first,
            possessive: last_word.possessive,
        });
        (candidate, last)
    }

    /// The last word of the run of capitalised words from `first` joined by
    /// single spaces (after a title, its period allowed): the name.
    fn name_run_end(&self, first: usize, is_title: bool) -> usize {
        let words = &self.words;
        let mut last = first;
        while last + 1 < words.len() && !words[last].possessive {
            let gap = &self.text[words[last].end..words[last + 1].start];
            let joined =
                gap == " " || (gap == ". " && words[last].period && last == first && is_title);
            let next = &words[last + 1];
            if joined
                && capitalised(&self.text[next.start..next.end])
                && !NEVER.contains(&self.folded(next).as_str())
            {
                last += 1;
            } else {
                break;
            }
        }
        last
    }
}

/// How a run of capitalised words names someone: a title before a name, a
/// lone kinship word, or a name; `None` for a lone title or a word that
/// never names anyone.
fn name_cue(folded_first: &str, is_title: bool, multiword: bool) -> Option<Cue> {
    if is_title && multiword {
        Some(Cue::Title)
    } else if !multiword && KINSHIP.contains(&folded_first) {
        Some(Cue::Kinship)
    } else if !multiword && (NEVER.contains(&folded_first) || is_title) {
        None
    } else {
        Some(Cue::Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::sentences;

    fn registry(lines: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nodes.jsonl");
        std::fs::write(&p, lines).unwrap();
        Registry::load(&p).unwrap()
    }

    fn linked(l: &Linker, text: &str) -> Vec<(String, String, bool)> {
        l.link(text)
            .into_iter()
            .map(|m| {
                (
                    text[m.start..m.end].to_string(),
                    l.nodes()[m.node].id.clone(),
                    m.exact_case,
                )
            })
            .collect()
    }

    const NODES: &str = r#"{"id":"user:sam","kind":"user","name":"Sam Patel","aliases":["Sam"]}
{"id":"agent:kestrel-bot","kind":"agent","name":"kestrel-bot","aliases":["Kestrel"]}
{"id":"person:lucia","kind":"person","name":"Lucía","aliases":["Dr. Ruiz"]}
"#;

    #[test]
    fn links_whole_words_longest_first_any_case_and_possessives() {
        let l = Linker::new(&registry(NODES));
        assert_eq!(
            linked(
                &l,
                "Sam Patel met sam. Sam's idea; Samantha and Samuel came."
            ),
            [
                ("Sam Patel".into(), "user:sam".into(), true),
                ("sam".into(), "user:sam".into(), false),
                ("Sam".into(), "user:sam".into(), true),
            ]
        );
        assert_eq!(
            linked(&l, "@kestrel-bot failed; Kestrel’s log; kestrel-botnet"),
            [
                ("kestrel-bot".into(), "agent:kestrel-bot".into(), true),
                ("Kestrel".into(), "agent:kestrel-bot".into(), true),
            ]
        );
        // Not inside e-mail addresses, paths or dotted names; a handle links.
        assert_eq!(
            linked(
                &l,
                "Mail sam@example.com, see github.com/sam or sam.patel; ping @sam. Sam."
            ),
            [
                ("sam".into(), "user:sam".into(), false),
                ("Sam".into(), "user:sam".into(), true),
            ]
        );
        assert_eq!(
            linked(&l, "LUCÍA and Dr. Ruiz"),
            [
                ("LUCÍA".into(), "person:lucia".into(), false),
                ("Dr. Ruiz".into(), "person:lucia".into(), true),
            ]
        );
    }

    fn cands(text: &str, taken: &[(usize, usize)]) -> Vec<(String, Cue)> {
        candidates(text, &sentences(text), taken)
            .into_iter()
            .map(|c| (text[c.start..c.end].to_string(), c.cue))
            .collect()
    }

    #[test]
    fn person_like_candidates_and_what_is_never_one() {
        assert_eq!(
            cands(
                "On Monday I asked Priya and Dr. Okafor. Aunt Rosa's cake; Mum called. @kestrel-bot broke CI on GitHub in March.",
                &[]
            ),
            [
                ("Priya".into(), Cue::Name),
                ("Dr. Okafor".into(), Cue::Title),
                ("Aunt Rosa".into(), Cue::Title),
                ("Mum".into(), Cue::Kinship),
                ("@kestrel-bot".into(), Cue::Handle),
            ]
        );
        assert_eq!(
            cands(
                "Then Sofia Reyes called, He'll say; O'Brien too; mail me@example.com.",
                &[]
            ),
            [
                ("Sofia Reyes".into(), Cue::Name),
                ("O'Brien".into(), Cue::Name)
            ]
        );
        // A span covered by a linked mention is not a candidate.
        assert_eq!(
            cands("Priya met Jonas.", &[(0, 5)]),
            [("Jonas".into(), Cue::Name)]
        );
    }

    #[test]
    fn sentence_start_and_possessive_are_marked() {
        let t = "Berlin was cold. We met Kofi's sister.";
        let c = candidates(t, &sentences(t), &[]);
        assert_eq!(c.len(), 2);
        assert!(c[0].sentence_initial && !c[0].possessive);
        assert_eq!(&t[c[1].start..c[1].end], "Kofi");
        assert!(!c[1].sentence_initial && c[1].possessive);
    }
}
