//! Deterministic detection of secrets and identifiers stated in a record's
//! text, for the `credentials_pii` sensitivity category.
//!
//! No model is involved: every finding comes from a shape (a regular
//! expression), a checksum where the identifier has one (Luhn for card
//! numbers, mod-97 for IBANs, Verhoeff for Aadhaar numbers) and the words
//! around it. The rules lean towards precision, because a false positive
//! quarantines a harmless memory:
//!
//! - a password, PIN or door code counts only when its value is stated
//!   ("password is hunter2", "PIN 4821"), or where it is written down
//!   ("the PIN is on a post-it in his wallet": anyone who reads the
//!   memory knows where to find it); a policy or a mention is not one;
//! - a number that its context calls an order, tracking, invoice or
//!   reference number is not a card, phone or id;
//! - an e-mail address or phone number that is a public line (a role address
//!   such as `support@`, a toll-free number, or one its context calls a
//!   helpline, customer service, reception, ...) is not a finding.

use regex::Regex;

mod checks;
pub mod content;
mod patterns;
#[cfg(test)]
mod tests;

use checks::{
    LOCK_WORDS, ROLE_MAILBOXES, SecretClass, all_same, digit_groups_ok, floor_char_boundary,
    looks_random, part_of_longer_number, phone_groups_ok, secret_value, toll_free, words_after,
    words_before,
};
pub use checks::{iban_valid, luhn_valid, verhoeff_valid};
use patterns::*;

/// What a rule detects: a secret (`credential.*`), an identifier
/// (`identifier.*`), a statement of self-harm (`safety.*`), or sensitive
/// content said in so many words (`financial.*`, `legal.*`, `sexual.*`;
/// [`content`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// A password, PIN, code, key or security answer.
    Credential,
    /// A card, bank account, government id, e-mail address or phone number.
    Identifier,
    /// A statement of self-harm or suicidal thoughts.
    Safety,
    /// A tax audit or undeclared income.
    Financial,
    /// A lawyer's letter or a wrongful dismissal.
    Legal,
    /// A kink or BDSM dating profile.
    Sexual,
}

impl Category {
    /// The category's name, the first part of its rules' ids.
    pub fn name(self) -> &'static str {
        match self {
            Category::Credential => "credential",
            Category::Identifier => "identifier",
            Category::Safety => "safety",
            Category::Financial => "financial",
            Category::Legal => "legal",
            Category::Sexual => "sexual",
        }
    }

    /// The sensitivity category a finding of such a rule gives a record.
    pub fn sensitive_category(self) -> &'static str {
        match self {
            Category::Credential | Category::Identifier => "credentials_pii",
            Category::Safety => crate::vocab::SAFETY_CATEGORY,
            Category::Financial => "finances_debt",
            Category::Legal => "legal_trouble",
            Category::Sexual => "sexual",
        }
    }
}

/// A named rule: its id (`<category>.<name>`, stable: a finding carries
/// it into the annotation's detector, `rules:<id>`), its category, and the
/// kind of finding it makes (`password`, `card_number`, ...; `safety` for
/// the safety statements, `content` for the content statements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedRule {
    /// The rule's id.
    pub id: &'static str,
    /// What it detects.
    pub category: Category,
    /// The kind of its findings.
    pub kind: &'static str,
}

/// The identifier and credential rules of this module: (id, kind).
const OWN_RULES: &[(&str, &str)] = &[
    ("credential.password", "password"),
    ("credential.pass_colon", "password"),
    ("credential.pin", "pin"),
    ("credential.lock_code", "pin"),
    ("credential.written_then_place", "written_credential"),
    ("credential.writes_down", "written_credential"),
    ("credential.place_with_secret", "written_credential"),
    ("credential.own_pin_on_a_note", "written_credential"),
    ("credential.stripe_key", "api_key"),
    ("credential.aws_key", "api_key"),
    ("credential.github_token", "api_key"),
    ("credential.slack_token", "api_key"),
    ("credential.google_api_key", "api_key"),
    ("credential.jwt", "api_key"),
    ("credential.token_keyword", "api_key"),
    ("identifier.card_number", "card_number"),
    ("identifier.iban", "iban"),
    ("identifier.us_ssn", "government_id"),
    ("identifier.uk_national_insurance", "government_id"),
    ("identifier.india_pan", "government_id"),
    ("identifier.aadhaar", "government_id"),
    ("identifier.document_number", "government_id"),
    ("identifier.email", "email"),
    ("identifier.phone", "phone"),
];

/// Every named rule: the identifier and credential rules of this module,
/// the named credential rules ([`crate::annotate::credential_rules`]), the
/// safety statements ([`crate::annotate::safety_rules`]) and the content
/// statements ([`content`]).
pub fn named_rules() -> Vec<NamedRule> {
    let category = |id: &str| match id.split('.').next() {
        Some("identifier") => Category::Identifier,
        Some("safety") => Category::Safety,
        Some("financial") => Category::Financial,
        Some("legal") => Category::Legal,
        Some("sexual") => Category::Sexual,
        _ => Category::Credential,
    };
    OWN_RULES
        .iter()
        .copied()
        .chain(crate::annotate::credential_rules::named())
        .chain(crate::annotate::safety_rules::rule_ids().map(|id| (id, "safety")))
        .chain(content::rule_ids().map(|id| (id, "content")))
        .map(|(id, kind)| NamedRule {
            id,
            category: category(id),
            kind,
        })
        .collect()
}

/// One identifier or secret found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The id of the rule that found it ([`named_rules`]).
    pub rule: &'static str,
    /// What it is: "password", "pin", "security_answer",
    /// "written_credential", "api_key", "card_number", "iban",
    /// "government_id", "email", "phone" (stable names, used in details).
    pub kind: &'static str,
    /// Byte offsets of the identifier itself in the text.
    pub start: usize,
    /// End byte offset (exclusive).
    pub end: usize,
}

/// The rules, compiled once.
pub struct Rules {
    /// A word that announces a secret ([`SECRET_KEYWORD`]: password, PIN, passcode, ...).
    secret_kw: Regex,
    /// The secret keyword directly followed by its value (`PIN 4821`).
    no_filler: Regex,
    /// The secret keyword, a few filler words, then the value (`the PIN is 4821`).
    with_filler: Regex,
    /// A secret and the place it is written down (`the login is on the
    /// fridge note`, `wrote the alarm code on the back of the calendar`,
    /// `a post-it on the monitor with all our passwords`, `my pin is on a
    /// post-it`).
    written: Vec<(&'static str, Regex)>,
    /// Words in or just before such a match that make it no finding: a
    /// Wi-Fi network's (shared with guests) or a rule about secrets
    /// (`no passwords are written on sticky notes`).
    written_not: Regex,
    /// API keys and tokens by their shape (`sk_live_…`, `AKIA…`, `ghp_…`, `xox?-…`, JWTs).
    api_shapes: Vec<(&'static str, Regex)>,
    /// A word that announces a token or key (`token`, `api key`, `secret key`).
    token_kw: Regex,
    /// A token-like value after the token keyword: 20 or more key characters.
    token_value: Regex,
    /// Card-number candidates (13–19 digits, spaced or dashed); a finding only if the Luhn check passes.
    card: Regex,
    /// IBAN candidates; a finding only if the mod-97 check passes.
    iban: Regex,
    /// US Social Security number shape (`123-45-6789`).
    ssn: Regex,
    /// UK National Insurance number shape (`QQ 12 34 56 C`).
    ni: Regex,
    /// Indian Permanent Account Number shape (`ABCDE1234F`).
    pan: Regex,
    /// Indian Aadhaar number shape (4-4-4 digits); a finding only if the Verhoeff check passes and no reference word precedes it.
    aadhaar: Regex,
    /// A word that announces a passport or driving licence number.
    doc_kw: Regex,
    /// A document-number-like value after the document keyword.
    doc_value: Regex,
    /// An e-mail address.
    email: Regex,
    /// A phone number in an unambiguous international or grouped shape.
    phone: Regex,
    /// Phone shapes too common to trust alone (`555-1234`): a finding only with a phone word in the six words before.
    phone_weak: Regex,
    /// Words that make a weak phone shape a phone number (`call`, `mobile`, `number`, ...).
    phone_ctx: Regex,
    /// Words just before a number that make it an order, tracking, invoice or reference number, not an identifier.
    reference_ctx: Regex,
    /// Words around a contact that make it a public line (support, helpline, reception, ...), not a person's.
    public_ctx: Regex,
    /// Statements of self-harm and suicidal thoughts (a safety record,
    /// not an identifier).
    safety: crate::annotate::safety_rules::SafetyRules,
    /// Named credential rules: a password keyword in another language, a
    /// `user / password` pair, a passphrase, a connection string, a
    /// security answer ([`crate::annotate::credential_rules`]).
    credentials: crate::annotate::credential_rules::CredentialRules,
    /// Sensitive content said in so many words: a tax audit, a lawyer's
    /// letter, a kink dating profile ([`content`]).
    content: content::ContentRules,
}

impl Default for Rules {
    fn default() -> Self {
        Self::new()
    }
}

// Priorities when two findings overlap (higher wins).
fn priority(kind: &str) -> u8 {
    match kind {
        "api_key" => 7,
        "iban" => 6,
        "card_number" => 5,
        "government_id" => 4,
        "password" | "pin" | "security_answer" => 3,
        // A stated value ("PIN is 4821 and it's on a post-it") names the
        // finding rather than the place it is written.
        "email" | "written_credential" => 2,
        _ => 1,
    }
}

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this module; a bad one is a bug caught
    // by every test.
    Regex::new(pattern).expect("sensitive_rules pattern compiles")
}

impl Rules {
    /// Compiles the rules.
    pub fn new() -> Self {
        Rules {
            secret_kw: re(SECRET_KEYWORD),
            no_filler: re(SECRET_VALUE_NO_FILLER),
            with_filler: re(SECRET_VALUE_WITH_FILLER),
            written: [
                ("credential.written_then_place", WRITTEN_SECRET_THEN_PLACE),
                ("credential.writes_down", WRITES_SECRET_DOWN),
                ("credential.place_with_secret", PLACE_WITH_SECRET),
                ("credential.own_pin_on_a_note", OWN_PIN_ON_A_NOTE),
            ]
            .iter()
            .map(|&(id, pattern)| (id, re(pattern)))
            .collect(),
            written_not: re(WRITTEN_NOT),
            api_shapes: API_KEY_SHAPES
                .iter()
                .map(|&(id, pattern)| (id, re(pattern)))
                .collect(),
            token_kw: re(TOKEN_KEYWORD),
            token_value: re(TOKEN_VALUE),
            card: re(CARD_NUMBER),
            iban: re(IBAN),
            ssn: re(US_SSN),
            ni: re(UK_NATIONAL_INSURANCE),
            pan: re(INDIA_PAN),
            aadhaar: re(AADHAAR),
            doc_kw: re(DOCUMENT_KEYWORD),
            doc_value: re(DOCUMENT_VALUE),
            email: re(EMAIL),
            phone: re(PHONE),
            phone_weak: re(PHONE_WEAK_SHAPES),
            phone_ctx: re(PHONE_CONTEXT),
            reference_ctx: re(REFERENCE_CONTEXT),
            public_ctx: re(PUBLIC_CONTEXT),
            safety: crate::annotate::safety_rules::SafetyRules::new(),
            credentials: crate::annotate::credential_rules::CredentialRules::new(),
            content: content::ContentRules::new(),
        }
    }

    /// The first statement of self-harm or suicidal thoughts in the text
    /// ([`crate::annotate::safety_rules`]).
    pub fn find_safety(&self, text: &str) -> Option<crate::annotate::safety_rules::SafetyFinding> {
        self.safety.find(text)
    }

    /// The first statement of sensitive content in the text: a tax audit,
    /// a lawyer's letter, a kink dating profile ([`content`]). Not a
    /// secret: nothing of it is masked.
    pub fn find_content(&self, text: &str) -> Option<content::ContentFinding> {
        self.content.find(text)
    }

    /// Every finding, in text order, non-overlapping.
    pub fn find(&self, text: &str) -> Vec<Finding> {
        let mut cands: Vec<Finding> = Vec::new();
        self.find_secrets(text, &mut cands);
        self.find_written_secrets(text, &mut cands);
        self.find_api_keys(text, &mut cands);
        self.find_cards(text, &mut cands);
        self.find_ibans(text, &mut cands);
        self.find_government_ids(text, &mut cands);
        self.find_emails(text, &mut cands);
        self.find_phones(text, &mut cands);
        cands.extend(self.credentials.find(text).into_iter().map(|f| Finding {
            rule: f.rule,
            kind: f.kind,
            start: f.start,
            end: f.end,
        }));

        // Highest priority first, then earliest, then longest.
        cands.sort_by(|a, b| {
            priority(b.kind)
                .cmp(&priority(a.kind))
                .then(a.start.cmp(&b.start))
                .then((b.end - b.start).cmp(&(a.end - a.start)))
        });
        let mut kept: Vec<Finding> = Vec::new();
        for c in cands {
            if kept.iter().all(|k| c.end <= k.start || c.start >= k.end) {
                kept.push(c);
            }
        }
        kept.sort_by_key(|f| (f.start, f.end));
        kept
    }

    fn find_secrets(&self, text: &str, out: &mut Vec<Finding>) {
        for caps in self.secret_kw.captures_iter(text) {
            let kw = caps.get(0).expect("group 0");
            let class = if caps.name("pw").is_some() {
                // "passwords need 12 characters" is about passwords in
                // general; only the singular announces a value.
                if kw.as_str().to_ascii_lowercase().ends_with('s') {
                    continue;
                }
                SecretClass::Password
            } else if caps.name("pass").is_some() {
                SecretClass::PassColon
            } else if caps.name("pin").is_some() {
                SecretClass::Pin
            } else {
                SecretClass::BareCode
            };
            let (rule, kind) = match class {
                SecretClass::Password => ("credential.password", "password"),
                SecretClass::PassColon => ("credential.pass_colon", "password"),
                SecretClass::Pin => ("credential.pin", "pin"),
                SecretClass::BareCode => ("credential.lock_code", "pin"),
            };
            let rest = &text[kw.end()..];
            let mut found = None;
            if class != SecretClass::BareCode
                && let Some(c) = self.no_filler.captures(rest)
            {
                let conn = c.name("conn").expect("conn").as_str();
                let val = c.name("val").expect("val");
                if let Some((s, e)) = secret_value(class, conn, val.as_str()) {
                    found = Some((val.start() + s, val.start() + e));
                }
            }
            if found.is_none()
                && let Some(c) = self.with_filler.captures(rest)
            {
                let fill = c.name("fill").expect("fill").as_str();
                let conn = c.name("conn").expect("conn").as_str();
                let val = c.name("val").expect("val");
                let names_a_lock = fill
                    .split(|ch: char| !ch.is_alphanumeric() && ch != '-')
                    .any(|w| LOCK_WORDS.contains(&w.to_lowercase().as_str()));
                if (class != SecretClass::BareCode || names_a_lock)
                    && let Some((s, e)) = secret_value(class, conn, val.as_str())
                {
                    found = Some((val.start() + s, val.start() + e));
                }
            }
            if let Some((s, e)) = found {
                out.push(Finding {
                    rule,
                    kind,
                    start: kw.end() + s,
                    end: kw.end() + e,
                });
            }
        }
    }

    /// A secret and where it is written down (see [`Rules::written`]),
    /// unless the match or the three words before it name a Wi-Fi network
    /// or a rule (`the guest wifi password is on the fridge`, `no passwords
    /// are written on sticky notes`).
    fn find_written_secrets(&self, text: &str, out: &mut Vec<Finding>) {
        for (rule, r) in &self.written {
            for m in r.find_iter(text) {
                if self.written_not.is_match(m.as_str())
                    || self.written_not.is_match(words_before(text, m.start(), 3))
                {
                    continue;
                }
                out.push(Finding {
                    rule,
                    kind: "written_credential",
                    start: m.start(),
                    end: m.end(),
                });
            }
        }
    }

    fn find_api_keys(&self, text: &str, out: &mut Vec<Finding>) {
        for (rule, r) in &self.api_shapes {
            for m in r.find_iter(text) {
                // `AIza` keys are exactly 39 characters; a longer run of the
                // same alphabet is something else.
                let next = text[m.end()..].chars().next();
                if m.as_str().starts_with("AIza")
                    && next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                {
                    continue;
                }
                out.push(Finding {
                    rule,
                    kind: "api_key",
                    start: m.start(),
                    end: m.end(),
                });
            }
        }
        // "api key: <value>", "token = <value>": a long, high-entropy value
        // on the same line, shortly after the keyword.
        for kw in self.token_kw.find_iter(text) {
            let window_end = floor_char_boundary(text, (kw.end() + 48).min(text.len()));
            let line_end = text[kw.end()..window_end]
                .find('\n')
                .map_or(window_end, |i| kw.end() + i);
            let window = &text[kw.end()..line_end];
            if let Some(v) = self.token_value.find(window) {
                // The value must start within the window and be a whole token.
                let abs_start = kw.end() + v.start();
                let mut abs_end = kw.end() + v.end();
                abs_end += text[abs_end..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_+/=.-".contains(c)))
                    .unwrap_or(text.len() - abs_end);
                let value = text[abs_start..abs_end].trim_end_matches('.');
                let abs_end = abs_start + value.len();
                let before = text[..abs_start].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric()) {
                    continue;
                }
                if looks_random(value) {
                    out.push(Finding {
                        rule: "credential.token_keyword",
                        kind: "api_key",
                        start: abs_start,
                        end: abs_end,
                    });
                }
            }
        }
    }

    fn find_cards(&self, text: &str, out: &mut Vec<Finding>) {
        for m in self.card.find_iter(text) {
            let s = m.as_str();
            if part_of_longer_number(text, m.start(), m.end()) || !digit_groups_ok(s, 3, 6, 4) {
                continue;
            }
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            if !(13..=19).contains(&digits.len()) || !luhn_valid(&digits) {
                continue;
            }
            if all_same(&digits)
                || (digits.len() == 13 && (digits.starts_with("978") || digits.starts_with("979")))
            {
                continue;
            }
            if self.reference_context(text, m.start()) {
                continue;
            }
            out.push(Finding {
                rule: "identifier.card_number",
                kind: "card_number",
                start: m.start(),
                end: m.end(),
            });
        }
    }

    fn find_ibans(&self, text: &str, out: &mut Vec<Finding>) {
        for m in self.iban.find_iter(text) {
            let s = m.as_str();
            // The greedy match may run on into a following uppercase word:
            // try the whole match, then shorter ones ending before a space.
            let mut ends: Vec<usize> = s.match_indices(' ').map(|(i, _)| i).collect();
            ends.push(s.len());
            for &e in ends.iter().rev() {
                let cand = &s[..e];
                let n = cand.chars().filter(|c| *c != ' ').count();
                if (15..=34).contains(&n) && iban_valid(cand) {
                    out.push(Finding {
                        rule: "identifier.iban",
                        kind: "iban",
                        start: m.start(),
                        end: m.start() + e,
                    });
                    break;
                }
            }
        }
    }

    fn find_government_ids(&self, text: &str, out: &mut Vec<Finding>) {
        for c in self.ssn.captures_iter(text) {
            let m = c.get(0).expect("group 0");
            let (area, group, serial) = (&c[1], &c[2], &c[3]);
            if area == "000"
                || area == "666"
                || area.starts_with('9')
                || group == "00"
                || serial == "0000"
            {
                continue;
            }
            if part_of_longer_number(text, m.start(), m.end())
                || self.reference_context(text, m.start())
            {
                continue;
            }
            out.push(gov("identifier.us_ssn", m.start(), m.end()));
        }
        for c in self.ni.captures_iter(text) {
            let m = c.get(0).expect("group 0");
            if ["BG", "GB", "NK", "KN", "TN", "NT", "ZZ"].contains(&&c[1]) {
                continue;
            }
            out.push(gov("identifier.uk_national_insurance", m.start(), m.end()));
        }
        for m in self.pan.find_iter(text) {
            out.push(gov("identifier.india_pan", m.start(), m.end()));
        }
        for c in self.aadhaar.captures_iter(text) {
            let m = c.get(0).expect("group 0");
            if c[1] != c[2] || part_of_longer_number(text, m.start(), m.end()) {
                continue;
            }
            let digits: String = m.as_str().chars().filter(char::is_ascii_digit).collect();
            if !verhoeff_valid(&digits) || self.reference_context(text, m.start()) {
                continue;
            }
            out.push(gov("identifier.aadhaar", m.start(), m.end()));
        }
        for kw in self.doc_kw.find_iter(text) {
            let rest = &text[kw.end()..];
            if let Some(c) = self.doc_value.captures(rest) {
                let v = c.name("val").expect("val");
                let val = v.as_str();
                // An id has digits; "passport renewal" or "licence expired" has none.
                let digits = val.chars().filter(char::is_ascii_digit).count();
                let alnum = val.chars().filter(char::is_ascii_alphanumeric).count();
                if digits >= 3 && alnum >= 6 {
                    out.push(gov(
                        "identifier.document_number",
                        kw.end() + v.start(),
                        kw.end() + v.end(),
                    ));
                }
            }
        }
    }

    fn find_emails(&self, text: &str, out: &mut Vec<Finding>) {
        for m in self.email.find_iter(text) {
            let addr = m.as_str();
            let local = addr.split('@').next().unwrap_or("").to_ascii_lowercase();
            let first = local.split(['.', '-', '_', '+']).next().unwrap_or("");
            if ROLE_MAILBOXES.contains(&local.as_str()) || ROLE_MAILBOXES.contains(&first) {
                continue;
            }
            // An address the words before give to an office is the
            // office's, not a person's ("email the office at ...").
            if self.public_context(text, m.start(), m.end())
                || words_before(text, m.start(), 5)
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|w| w.eq_ignore_ascii_case("office"))
            {
                continue;
            }
            out.push(Finding {
                rule: "identifier.email",
                kind: "email",
                start: m.start(),
                end: m.end(),
            });
        }
    }

    fn find_phones(&self, text: &str, out: &mut Vec<Finding>) {
        for m in self.phone.find_iter(text) {
            let s = m.as_str();
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            if !(7..=15).contains(&digits.len()) {
                continue;
            }
            if s.starts_with('+') && digits.len() < 9 {
                continue;
            }
            if s.starts_with('0') && !(10..=11).contains(&digits.len()) {
                continue;
            }
            if part_of_longer_number(text, m.start(), m.end()) || !phone_groups_ok(s) {
                continue;
            }
            if toll_free(s, &digits) {
                continue;
            }
            if self.phone_weak.is_match(s)
                && !self.phone_ctx.is_match(words_before(text, m.start(), 6))
            {
                continue;
            }
            if self.reference_context(text, m.start())
                || self.public_context(text, m.start(), m.end())
            {
                continue;
            }
            out.push(Finding {
                rule: "identifier.phone",
                kind: "phone",
                start: m.start(),
                end: m.end(),
            });
        }
    }

    /// The few words before `start` (same line) call the number an order,
    /// tracking, invoice, reference, ... number.
    fn reference_context(&self, text: &str, start: usize) -> bool {
        self.reference_ctx.is_match(words_before(text, start, 4))
    }

    /// The words around a contact (same line, a few before and after) say
    /// it is a public line.
    fn public_context(&self, text: &str, start: usize, end: usize) -> bool {
        self.public_ctx.is_match(words_before(text, start, 8))
            || self.public_ctx.is_match(words_after(text, end, 4))
    }
}

fn gov(rule: &'static str, start: usize, end: usize) -> Finding {
    Finding {
        rule,
        kind: "government_id",
        start,
        end,
    }
}
