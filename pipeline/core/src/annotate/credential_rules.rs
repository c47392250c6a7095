//! Named rules for credentials the keyword rules of
//! [`crate::annotate::sensitive_rules`] do not reach: a password keyword in
//! another language, a `user / password` pair, a passphrase of several
//! words, a connection string with its password, and the answers to
//! security questions (a mother's maiden name, a first pet's name), which unlock
//! an account as surely as a password.
//!
//! Each rule has a stable id (`credential.<name>`, listed in [`RULE_IDS`])
//! and yields the value's byte span; the finding's kind is `password` or
//! `security_answer`.

use regex::{Captures, Regex};

/// Every rule's id, in the order the rules run.
pub const RULE_IDS: [&str; 5] = [
    "credential.foreign_password_keyword",
    "credential.user_slash_password",
    "credential.passphrase_words",
    "credential.connection_string",
    "credential.security_answer",
];

/// "Password" in other languages, then a connector and the value:
/// "contraseña: Girasol#77", "Passwort ist Tannenbaum42", "le mot de passe
/// est soleil2019", "senha é Praia2020".
const FOREIGN_PASSWORD: &str = concat!(
    r"(?i)\b(?:contraseña|contrasena|clave|passwort|kennwort|mot[ \t]+de[ \t]+passe|senha|wachtwoord",
    r"|lösenord|losenord|adgangskode|passord|salasana|hasło|haslo|parola|пароль|şifre|sifre)",
    r"(?:[ \t]+(?:de|del|von|für|fur|du|da|do|van|für[ \t]+das|[a-zà-ÿ]+)){0,2}?",
    r"(?:[ \t]*[:=][ \t]*|[ \t]+(?:es|era|ist|war|lautet|est|était|etait|é|era|is|was|è|er|är|on|jest)[ \t]+(?::[ \t]*)?)",
    r"(?P<val>[^\s]+)",
);

/// A login, then `user / password` or `user:password` (no space around
/// the colon: "account email: x" is a field, not a pair): "the admin
/// login is root / Summer2024!", "creds: deploy/Hx7-pl!q".
const USER_SLASH_PASSWORD: &str = concat!(
    r"(?i)\b(?:log-?ins?|credentials|creds|sign-?in|account)\b",
    r"(?:[ \t]+(?:is|are|was|were|for[ \t]+[^\s]+(?:[ \t]+[^\s]+)?[ \t]+(?:is|are)))?[ \t]*:?[ \t]*",
    r"(?P<user>[^\s/:]{2,40})(?:[ \t]*/[ \t]*|:)(?P<val>[^\s]+)",
);

/// A passphrase of three to twelve words: "the passphrase is correct horse
/// battery staple", "seed phrase: ocean maple tiger ...".
const PASSPHRASE: &str = concat!(
    r"(?i)\b(?:pass[ \t]?phrase|seed[ \t]+phrase|recovery[ \t]+phrase|mnemonic)",
    r"(?:[ \t]+(?:for|of|to)[ \t]+[^\s]+(?:[ \t]+[^\s]+)?)?",
    r"(?:[ \t]*[:=][ \t]*|[ \t]+(?:is|was|reads)[ \t]+(?::[ \t]*)?)",
    r#"["“'‘]?(?P<val>\p{L}+(?:[ \t-]+\p{L}+){2,11})"#,
);

/// A URL with a password in it (`postgres://app:S3cr3t@db:5432/main`), or
/// a connection string's `Password=` / `Pwd=` field.
const CONNECTION_STRING: &str = concat!(
    r"(?i)(?:\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]+:(?P<url>[^\s@/]+)@[^\s]+",
    r"|(?:^|[;\s])(?:password|pwd)[ \t]*=[ \t]*(?P<field>[^;\s]+)[ \t]*;)",
);

/// A security question and its answer: "mother's maiden name Ferreira",
/// "first pet was Chispa", "security answer: bluebell".
const SECURITY_ANSWER: &str = concat!(
    r"(?i)\b(?:mother['’]?s[ \t]+maiden[ \t]+name|maiden[ \t]+name",
    r"|first[ \t]+pet(?:['’]s[ \t]+name)?|name[ \t]+of[ \t]+(?:my|his|her|their|your)[ \t]+first[ \t]+pet",
    r"|security[ \t]+(?:answers?|questions?)|memorable[ \t]+(?:word|answer|information))",
    r"(?P<conn>[ \t]+(?:is|was|are|were|answer)[ \t]+|[ \t]*[:=][ \t]*|[ \t]+)",
    r#"["“'‘]?(?P<val>[\p{L}][\p{L}\p{N}'’-]{1,40})"#,
);

/// Words that follow a security-question phrase without being its answer.
const NOT_AN_ANSWER: &[&str] = &[
    "and",
    "or",
    "the",
    "a",
    "an",
    "is",
    "was",
    "of",
    "for",
    "to",
    "in",
    "on",
    "at",
    "with",
    "question",
    "questions",
    "answer",
    "answers",
    "reset",
    "again",
    "wrong",
    "right",
    "too",
    "as",
    "but",
    "so",
    "that",
    "this",
    "which",
    "who",
    "when",
    "if",
    "because",
    "thing",
    "things",
    "stuff",
    "trick",
    "never",
    "not",
    "i",
    "you",
    "he",
    "she",
    "we",
    "they",
    "it",
    "my",
    "his",
    "her",
    "our",
    "their",
    "your",
    "still",
    "also",
    "just",
    "then",
    "there",
    "check",
    "checks",
    "every",
    "be",
    "being",
    "been",
    "are",
    "were",
    "will",
    "would",
];

/// Values after a password keyword that are not a password.
const NOT_A_VALUE: &[&str] = &[
    "olvidada",
    "vergessen",
    "oublié",
    "oublie",
    "esquecida",
    "nueva",
    "neue",
    "nouveau",
    "nouvelle",
    "nova",
    "reset",
    "changed",
    "forgotten",
    "expired",
    "wrong",
    "incorrect",
];

/// One finding: the rule that made it, its kind (`password` or
/// `security_answer`) and the value's byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule's id ([`RULE_IDS`]).
    pub rule: &'static str,
    /// `password` or `security_answer`.
    pub kind: &'static str,
    /// First byte of the value.
    pub start: usize,
    /// End byte of the value (exclusive).
    pub end: usize,
}

/// What a rule's value must also be to count (the match alone says where
/// a value would be, not that it is one).
type Check = fn(value: &str, caps: &Captures<'_>) -> bool;

/// One rule as written: its id, the finding's kind, its pattern and its
/// check.
struct Spec {
    id: &'static str,
    kind: &'static str,
    pattern: &'static str,
    check: Check,
}

/// The rules, in the order they run ([`RULE_IDS`]).
const SPECS: [Spec; 5] = [
    Spec {
        id: RULE_IDS[0],
        kind: "password",
        pattern: FOREIGN_PASSWORD,
        check: chosen_value,
    },
    Spec {
        id: RULE_IDS[1],
        kind: "password",
        pattern: USER_SLASH_PASSWORD,
        check: chosen_value,
    },
    Spec {
        id: RULE_IDS[2],
        kind: "password",
        pattern: PASSPHRASE,
        check: passphrase,
    },
    Spec {
        id: RULE_IDS[3],
        kind: "password",
        pattern: CONNECTION_STRING,
        check: connection_password,
    },
    Spec {
        id: RULE_IDS[4],
        kind: "security_answer",
        pattern: SECURITY_ANSWER,
        check: security_answer,
    },
];

/// Every rule's (id, kind).
pub fn named() -> impl Iterator<Item = (&'static str, &'static str)> {
    SPECS.iter().map(|s| (s.id, s.kind))
}

/// One compiled rule.
struct Rule {
    id: &'static str,
    kind: &'static str,
    pattern: Regex,
    check: Check,
}

/// The compiled rules.
pub struct CredentialRules {
    rules: Vec<Rule>,
}

impl Default for CredentialRules {
    fn default() -> Self {
        Self::new()
    }
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("credential rule pattern: {e}"))
}

/// The value's span without trailing sentence punctuation or a closing
/// quote.
fn trimmed(text: &str, start: usize, end: usize) -> (usize, usize) {
    let value = text[start..end].trim_end_matches(['.', ',', ';', ')', ']', '"', '”', '\'', '’']);
    (start, start + value.len())
}

/// A chosen secret rather than a word: four or more characters, with a
/// digit, a symbol inside, or a capital inside; or six or more letters
/// and digits when the connector was explicit.
fn chosen(value: &str) -> bool {
    let n = value.chars().count();
    if n < 4 || NOT_A_VALUE.contains(&value.to_lowercase().as_str()) {
        return false;
    }
    let digits = value.chars().any(|c| c.is_ascii_digit());
    let inner_symbol = value
        .chars()
        .take(n.saturating_sub(1))
        .any(|c| !c.is_alphanumeric());
    let inner_capital = value.chars().skip(1).any(char::is_uppercase);
    digits || inner_symbol || (inner_capital && n >= 6)
}

impl CredentialRules {
    /// Compiles the rules.
    pub fn new() -> Self {
        Self {
            rules: SPECS
                .iter()
                .map(|s| Rule {
                    id: s.id,
                    kind: s.kind,
                    pattern: re(s.pattern),
                    check: s.check,
                })
                .collect(),
        }
    }

    /// Every finding of every rule (they may overlap; the caller keeps
    /// the best of overlapping findings).
    pub fn find(&self, text: &str) -> Vec<Finding> {
        let mut out = Vec::new();
        for rule in &self.rules {
            for caps in rule.pattern.captures_iter(text) {
                if let Some((start, end)) = value_of(rule.check, text, &caps) {
                    out.push(Finding {
                        rule: rule.id,
                        kind: rule.kind,
                        start,
                        end,
                    });
                }
            }
        }
        out
    }
}

/// The span of the secret a rule's match states, if it passes the rule's
/// check.
fn value_of(check: Check, text: &str, caps: &Captures<'_>) -> Option<(usize, usize)> {
    let group = caps
        .name("val")
        .or_else(|| caps.name("url"))
        .or_else(|| caps.name("field"))?;
    let (start, end) = trimmed(text, group.start(), group.end());
    check(&text[start..end], caps).then_some((start, end))
}

/// A chosen password ([`chosen`]).
fn chosen_value(value: &str, _: &Captures<'_>) -> bool {
    chosen(value)
}

/// Three or more words, none of them a function word.
fn passphrase(value: &str, _: &Captures<'_>) -> bool {
    let words: Vec<&str> = value
        .split([' ', '\t', '-'])
        .filter(|w| !w.is_empty())
        .collect();
    words.len() >= 3
        && words
            .iter()
            .all(|w| !NOT_AN_ANSWER.contains(&w.to_lowercase().as_str()))
}

/// Four characters or more.
fn connection_password(value: &str, _: &Captures<'_>) -> bool {
    value.chars().count() >= 4
}

/// An answer: without ":" or "=", only a name ("first pet Chispa", not
/// "first pet died").
fn security_answer(value: &str, caps: &Captures<'_>) -> bool {
    let explicit = caps
        .name("conn")
        .is_some_and(|c| c.as_str().contains([':', '=']));
    let lower = value.to_lowercase();
    value.chars().count() >= 2
        && !NOT_AN_ANSWER.contains(&lower.as_str())
        && (explicit || value.chars().next().is_some_and(char::is_uppercase))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(&'static str, &str)> {
        CredentialRules::new()
            .find(text)
            .into_iter()
            .map(|f| (f.rule, &text[f.start..f.end]))
            .collect()
    }

    #[test]
    fn each_rule_finds_the_value_it_names() {
        let cases = [
            (
                "Mother's maiden name Ferreira, first pet Chispa.",
                vec![
                    ("credential.security_answer", "Ferreira"),
                    ("credential.security_answer", "Chispa"),
                ],
            ),
            (
                "the admin login is root / Summer2024!",
                vec![("credential.user_slash_password", "Summer2024!")],
            ),
            (
                "Wallet passphrase is correct horse battery staple.",
                vec![(
                    "credential.passphrase_words",
                    "correct horse battery staple",
                )],
            ),
            (
                "use postgres://app:S3cr3tPw@db.internal:5432/main for now",
                vec![("credential.connection_string", "S3cr3tPw")],
            ),
            (
                "Server=db1;User Id=sa;Password=Tr0ub4dor;",
                vec![("credential.connection_string", "Tr0ub4dor")],
            ),
            (
                "La contraseña es Girasol#77.",
                vec![("credential.foreign_password_keyword", "Girasol#77")],
            ),
            (
                "Das Passwort ist Tannenbaum42",
                vec![("credential.foreign_password_keyword", "Tannenbaum42")],
            ),
            (
                "mot de passe : soleil2019",
                vec![("credential.foreign_password_keyword", "soleil2019")],
            ),
        ];
        for (text, want) in cases {
            assert_eq!(found(text), want, "{text}");
        }
    }

    #[test]
    fn talk_about_credentials_without_a_value_is_no_finding() {
        for text in [
            "I forgot my mother's maiden name question again, had to reset it.",
            "Security questions are a bad idea, says the bank.",
            "The login page is down again.",
            "Contraseña olvidada: had to reset it twice.",
            "We talked about passphrases and why they beat passwords.",
            "My first pet died when I was ten.",
            "Her first pet was a golden retriever.",
            "Account 4 / 5 done, the rest tomorrow.",
        ] {
            let f = found(text);
            assert!(f.is_empty(), "{text}: {f:?}");
        }
    }
}

#[cfg(test)]
mod on_the_data {
    use super::*;

    /// The false-positive figure: no record of the labeled ToM-lite sets,
    /// and no control (not sensitive) record of `data/sensitivity`, holds
    /// a finding of these rules.
    #[test]
    fn no_finding_on_the_training_records_or_the_sensitivity_controls() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data");
        let rules = CredentialRules::new();
        let (mut read, mut found) = (0usize, Vec::new());
        for dir in ["training/tom_lite", "training/styles", "sensitivity"] {
            let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            files.sort();
            for f in files {
                for line in std::fs::read_to_string(&f).unwrap().lines() {
                    let r: serde_json::Value = serde_json::from_str(line).unwrap();
                    if r["sensitivity"]["sensitive"] == true {
                        continue;
                    }
                    let text = r["text"].as_str().unwrap();
                    read += 1;
                    for x in rules.find(text) {
                        found.push(format!("{} {}: {}", r["id"], x.rule, &text[x.start..x.end]));
                    }
                }
            }
        }
        assert!(read > 5_000, "{read}");
        assert!(found.is_empty(), "{} of {read}: {found:#?}", found.len());
    }
}
