//! What a pattern's match must also pass to be a finding: checksums
//! (Luhn, mod-97, Verhoeff), the shape of a stated value, and the words
//! around a number or a contact.

/// The kind of value a secret keyword announces.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SecretClass {
    /// "password", "pw", "passphrase": any strong-looking token.
    Password,
    /// "pass": only with an explicit `:`/`=`.
    PassColon,
    /// "PIN", "passcode", "key safe", qualified "code": digits.
    Pin,
    /// Unqualified "code"/"combination": digits, and the words between the
    /// keyword and the value must name a door, gate, safe, lock, ...
    BareCode,
}

/// Words between a door, gate, safe, ... and "code": "the code for the gate is".
pub(super) const LOCK_WORDS: &[&str] = &[
    "gate", "door", "front", "back", "alarm", "safe", "lock", "padlock", "locker", "garage",
    "building", "entry", "keypad", "flat", "house", "shed", "box", "key", "wifi", "wi-fi",
    "router", "phone", "card", "bike",
];

/// Mailboxes that belong to a role, not a person.
pub(super) const ROLE_MAILBOXES: &[&str] = &[
    "support",
    "help",
    "helpdesk",
    "info",
    "information",
    "noreply",
    "no-reply",
    "donotreply",
    "do-not-reply",
    "sales",
    "press",
    "media",
    "contact",
    "contactus",
    "hello",
    "hi",
    "team",
    "admin",
    "administrator",
    "billing",
    "accounts",
    "enquiries",
    "enquiry",
    "inquiries",
    "office",
    "careers",
    "jobs",
    "hr",
    "service",
    "services",
    "customerservice",
    "customercare",
    "care",
    "feedback",
    "marketing",
    "webmaster",
    "postmaster",
    "hostmaster",
    "abuse",
    "security",
    "privacy",
    "legal",
    "orders",
    "bookings",
    "booking",
    "reservations",
    "reception",
    "newsletter",
    "news",
    "mail",
    "general",
    "notifications",
    "alerts",
];

/// Words that are never a stated password ("password is on the fridge").
pub(super) const NOT_A_PASSWORD: &[&str] = &[
    "the",
    "a",
    "an",
    "on",
    "in",
    "at",
    "is",
    "was",
    "it",
    "its",
    "it's",
    "still",
    "same",
    "whatever",
    "my",
    "your",
    "his",
    "her",
    "their",
    "our",
    "that",
    "this",
    "what",
    "which",
    "written",
    "stored",
    "saved",
    "expired",
    "wrong",
    "correct",
    "changed",
    "reset",
    "required",
    "optional",
    "none",
    "unknown",
    "forgotten",
    "too",
    "very",
    "not",
    "policy",
    "manager",
    "change",
    "changes",
    "rules",
    "requirements",
    "protected",
    "somewhere",
    "there",
    "here",
    "below",
    "above",
    "attached",
    "hidden",
    "secret",
    "private",
    "weak",
    "strong",
    "long",
    "short",
    "and",
    "or",
    "to",
    "for",
    "of",
    "with",
    "by",
    "from",
    "now",
    "just",
    "also",
    "again",
    "please",
];

/// The value after a secret keyword, as (start, end) within `token`, or
/// None when it does not look like a stated secret.
pub(super) fn secret_value(class: SecretClass, conn: &str, token: &str) -> Option<(usize, usize)> {
    let explicit = conn.contains(':') || conn.contains('=');
    let (mut s, mut e) = (0usize, token.len());
    let quoted = token.starts_with(['"', '“', '\'', '‘', '`']);
    if quoted {
        s = token.chars().next().map_or(0, char::len_utf8);
    }
    // Trailing sentence punctuation and closing quotes are not the value.
    while e > s {
        let last = token[s..e].chars().next_back().expect("non-empty");
        let strip = match class {
            SecretClass::Password | SecretClass::PassColon => ".,;:)]\"”'’`".contains(last),
            _ => ".,;:!?)]\"”'’`".contains(last),
        };
        if !strip {
            break;
        }
        e -= last.len_utf8();
    }
    let val = &token[s..e];
    if val.is_empty() {
        return None;
    }
    let ok = match class {
        SecretClass::Pin | SecretClass::BareCode => {
            let body = val.trim_end_matches(['#', '*']);
            (3..=10).contains(&body.len())
                && body.chars().all(|c| c.is_ascii_digit())
                && !val.starts_with('#')
        }
        SecretClass::Password | SecretClass::PassColon => {
            if class == SecretClass::PassColon && !explicit {
                return None;
            }
            let lower = val.to_lowercase();
            if NOT_A_PASSWORD.contains(&lower.as_str()) || val.chars().count() < 4 {
                false
            } else {
                looks_like_password(val)
                    || ((explicit || quoted)
                        && val.chars().count() >= 6
                        && val.chars().all(char::is_alphanumeric))
            }
        }
    };
    ok.then_some((s, e))
}

/// Letters mixed with digits or symbols, or internal capitals: a chosen
/// password rather than an English word.
pub(super) fn looks_like_password(v: &str) -> bool {
    let letters = v.chars().filter(|c| c.is_alphabetic()).count();
    let digits = v.chars().filter(char::is_ascii_digit).count();
    // A final "!" or "?" is punctuation as often as not; count inner symbols.
    let n_chars = v.chars().count();
    let symbols = v
        .chars()
        .take(n_chars.saturating_sub(1))
        .filter(|c| !c.is_alphanumeric())
        .count();
    let inner_caps = v.chars().skip(1).filter(|c| c.is_uppercase()).count();
    let n = v.chars().count();
    if digits == n {
        // A numeric password: long enough not to be a count or a year.
        return n >= 4;
    }
    letters > 0 && (digits > 0 || symbols > 0 || (inner_caps > 0 && n >= 6))
}

/// A value a person would not type by chance: letters and digits, and a
/// high per-character entropy.
pub(super) fn looks_random(v: &str) -> bool {
    let n = v.len();
    if n < 20 {
        return false;
    }
    let has_digit = v.bytes().any(|b| b.is_ascii_digit());
    let has_alpha = v.bytes().any(|b| b.is_ascii_alphabetic());
    if !has_digit || !has_alpha {
        return false;
    }
    let mut counts = [0usize; 256];
    for b in v.bytes() {
        counts[b as usize] += 1;
    }
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n as f64;
            -p * p.log2()
        })
        .sum();
    entropy >= 3.5
}

pub(super) fn all_same(digits: &str) -> bool {
    let b = digits.as_bytes();
    b.iter().all(|&d| d == b[0])
}

/// Digit groups separated by one kind of separator (space or dash), each
/// group `min..=max` long, the first `first_max` at most; no separator at
/// all is fine too.
pub(super) fn digit_groups_ok(s: &str, min: usize, max: usize, first_max: usize) -> bool {
    let has_space = s.contains(' ');
    let has_dash = s.contains('-');
    if has_space && has_dash {
        return false;
    }
    if !has_space && !has_dash {
        return true;
    }
    let groups: Vec<&str> = s.split([' ', '-']).collect();
    groups.iter().all(|g| (min..=max).contains(&g.len())) && groups[0].len() <= first_max
}

/// A phone number's groups: no group of one digit (that is a list of
/// numbers, not a phone number), except a country or trunk prefix.
pub(super) fn phone_groups_ok(s: &str) -> bool {
    // "+44 (0)20 ...": the bracketed trunk zero is not a group.
    let s = s.replace("(0)", " ");
    let groups: Vec<&str> = s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|g| !g.is_empty())
        .collect();
    groups.iter().skip(1).all(|g| g.len() >= 2)
}

/// Toll-free numbers are public lines by definition.
pub(super) fn toll_free(s: &str, digits: &str) -> bool {
    let national = if s.starts_with("+1")
        || (digits.len() == 11 && digits.starts_with('1') && !s.starts_with('+'))
    {
        &digits[1..]
    } else if s.starts_with('+') {
        return false;
    } else {
        digits
    };
    ["800", "833", "844", "855", "866", "877", "888"]
        .iter()
        .any(|p| national.starts_with(p) && national.len() == 10)
        || ["0800", "0808", "0500", "1800", "1300", "1850"]
            .iter()
            .any(|p| national.starts_with(p))
}

/// The match is one piece of a longer run of digit groups ("1234 5678"
/// inside "9400 1234 5678 22"), so it is not the identifier itself.
pub(super) fn part_of_longer_number(text: &str, start: usize, end: usize) -> bool {
    let before = &text.as_bytes()[..start];
    let after = &text.as_bytes()[end..];
    let digit_before = match before {
        [.., d, b' ' | b'-' | b'.' | b'/'] if d.is_ascii_digit() => true,
        [.., d] if d.is_ascii_digit() => true,
        _ => false,
    };
    let digit_after = match after {
        [b' ' | b'-' | b'.' | b'/', d, ..] if d.is_ascii_digit() => true,
        [d, ..] if d.is_ascii_digit() => true,
        _ => false,
    };
    digit_before || digit_after
}

pub(super) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Up to `n` words before `start` on the same line.
pub(super) fn words_before(text: &str, start: usize, n: usize) -> &str {
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let seg = &text[line_start..start];
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in seg.char_indices().rev() {
        if c.is_whitespace() {
            if in_word {
                count += 1;
                if count == n {
                    return &seg[i..];
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    seg
}

/// Up to `n` words after `end` on the same line.
pub(super) fn words_after(text: &str, end: usize, n: usize) -> &str {
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    let seg = &text[end..line_end];
    let mut count = 0;
    let mut in_word = false;
    for (i, c) in seg.char_indices() {
        if c.is_whitespace() {
            if in_word {
                count += 1;
                if count == n {
                    return &seg[..i];
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    seg
}

/// Luhn check of a digit string; any non-digit character, or fewer than
/// two digits, fails.
pub fn luhn_valid(digits: &str) -> bool {
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// IBAN mod-97 check (spaces allowed, case-insensitive): two letters, two
/// check digits, 11 to 30 letters or digits.
pub fn iban_valid(s: &str) -> bool {
    let compact: Vec<u8> = s
        .bytes()
        .filter(|b| *b != b' ')
        .map(|b| b.to_ascii_uppercase())
        .collect();
    if !(15..=34).contains(&compact.len())
        || !compact[..2].iter().all(u8::is_ascii_uppercase)
        || !compact[2..4].iter().all(u8::is_ascii_digit)
        || !compact.iter().all(u8::is_ascii_alphanumeric)
    {
        return false;
    }
    let mut rem: u32 = 0;
    for &b in compact[4..].iter().chain(&compact[..4]) {
        if b.is_ascii_digit() {
            rem = (rem * 10 + u32::from(b - b'0')) % 97;
        } else {
            rem = (rem * 100 + u32::from(b - b'A' + 10)) % 97;
        }
    }
    rem == 1
}

pub(super) const VERHOEFF_D: [[u8; 10]; 10] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
    [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
    [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
    [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
    [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
    [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
];
pub(super) const VERHOEFF_P: [[u8; 10]; 8] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
    [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
    [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
    [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
    [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
];

/// Verhoeff check of a digit string whose last digit is the check digit
/// (Aadhaar numbers); any non-digit character fails.
pub fn verhoeff_valid(digits: &str) -> bool {
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let mut c = 0u8;
    for (i, b) in digits.bytes().rev().enumerate() {
        c = VERHOEFF_D[c as usize][VERHOEFF_P[i % 8][(b - b'0') as usize] as usize];
    }
    c == 0
}
