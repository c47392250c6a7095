//! Masking: the value of a credential or identifier that the sensitive
//! rules find in a record (a password, PIN, security answer, API key, card
//! number, IBAN, government id, e-mail address or phone number) is
//! replaced by `*` of the same byte length in every text a staged row
//! carries (the record's text, quotes, details, raw annotations), so every
//! report and table shows where it was and what kind it was, never the
//! value. Offsets stay valid. What stays is the kind, the length and a
//! short fingerprint (`password, 11 bytes, sha256:1f0c2a9e`): two rows
//! naming the same fingerprint name the same value. The source files are
//! never touched, and the state keeps the record's own fingerprint, so a
//! curator's decision on a masked item still matches its record.

use std::borrow::Cow;
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

use crate::annotate::sensitive_rules::Rules;
use crate::ingest::record::Record;

/// The rules, compiled once for the process.
static RULES: LazyLock<Rules> = LazyLock::new(Rules::new);

/// The kinds of finding whose value is masked (a `written_credential` is
/// a phrase about where a secret is written, not the value).
const MASKED_KINDS: [&str; 9] = [
    "password",
    "pin",
    "security_answer",
    "api_key",
    "card_number",
    "iban",
    "government_id",
    "email",
    "phone",
];

/// The secrets of one record's text.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    /// Each value (longest first, distinct).
    values: Vec<String>,
    /// Its byte spans in the record's text.
    spans: Vec<(usize, usize)>,
    /// `kind, N bytes, sha256:xxxxxxxx` per finding, `; `-joined.
    summary: Option<String>,
}

impl Secrets {
    /// The masked findings of `text`.
    pub(crate) fn of(text: &str) -> Self {
        let found: Vec<_> = RULES
            .find(text)
            .into_iter()
            .filter(|f| MASKED_KINDS.contains(&f.kind) && f.end > f.start)
            .collect();
        if found.is_empty() {
            return Self::default();
        }
        let summary = found
            .iter()
            .map(|f| {
                let value = &text[f.start..f.end];
                let digest = hex::encode(Sha256::digest(value.as_bytes()));
                format!("{}, {} bytes, sha256:{}", f.kind, value.len(), &digest[..8])
            })
            .collect::<Vec<_>>()
            .join("; ");
        let mut values: Vec<String> = found
            .iter()
            .map(|f| text[f.start..f.end].to_string())
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        values.dedup();
        Self {
            values,
            spans: found.iter().map(|f| (f.start, f.end)).collect(),
            summary: Some(summary),
        }
    }

    /// Whether nothing is masked.
    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The record's text with every finding's bytes as `*`.
    pub(crate) fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        let mut spans = self.spans.clone();
        spans.sort_unstable();
        for (start, end) in spans {
            if start < at {
                continue;
            }
            out.push_str(&text[at..start]);
            out.push_str(&"*".repeat(end - start));
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// Any other text of the record's rows (a quote, a detail, a raw
    /// annotation) with every occurrence of a value as `*`.
    pub(crate) fn other<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.is_empty() || !self.values.iter().any(|v| s.contains(v.as_str())) {
            return Cow::Borrowed(s);
        }
        let mut out = s.to_string();
        for v in &self.values {
            out = out.replace(v.as_str(), &"*".repeat(v.len()));
        }
        Cow::Owned(out)
    }

    /// What was masked: `kind, N bytes, sha256:xxxxxxxx` per value.
    pub(crate) fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }
}

/// The secrets of the record last asked about: a record's rows are staged
/// one after another, so each record's text is searched once.
#[derive(Debug, Default)]
pub(crate) struct Masks {
    last: Option<(String, usize, Secrets)>,
}

impl Masks {
    /// The secrets of `record`.
    pub(crate) fn of(&mut self, record: &Record) -> &Secrets {
        let fresh = !matches!(&self.last, Some((id, len, _)) if *id == record.id && *len == record.text.len());
        if fresh {
            self.last = Some((
                record.id.clone(),
                record.text.len(),
                Secrets::of(&record.text),
            ));
        }
        &self.last.as_ref().expect("just set").2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_stars_of_the_same_byte_length_and_the_summary_keeps_kind_and_fingerprint() {
        let text = "My bank password is Tr0ub4dor&3 and the PIN is 4821.";
        let s = Secrets::of(text);
        let masked = s.text(text);
        assert_eq!(masked.len(), text.len());
        assert_eq!(
            masked,
            "My bank password is *********** and the PIN is ****."
        );
        assert_eq!(
            s.other("password is Tr0ub4dor&3"),
            "password is ***********"
        );
        let summary = s.summary().unwrap();
        assert!(
            summary.starts_with("password, 11 bytes, sha256:"),
            "{summary}"
        );
        assert!(summary.contains("; pin, 4 bytes, sha256:"), "{summary}");
        assert!(!summary.contains("Tr0ub4dor"));
    }

    #[test]
    fn a_text_without_secrets_is_borrowed_as_is() {
        let s = Secrets::of("Dentist moved to Tuesday.");
        assert!(s.is_empty() && s.summary().is_none());
        assert!(matches!(s.text("Dentist"), Cow::Borrowed(_)));
        assert!(matches!(s.other("Dentist"), Cow::Borrowed(_)));
    }
}
