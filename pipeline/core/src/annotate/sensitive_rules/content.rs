//! Deterministic detection of sensitive content said in so many words,
//! beside the secrets and identifiers of the other rules: a tax audit or
//! undeclared income (`finances_debt`), a lawyer's letter or a wrongful
//! dismissal (`legal_trouble`), a kink or BDSM dating profile (`sexual`).
//!
//! The model decides degree and context; these rules catch the plain
//! statements it has been seen to miss, and stay away from what only
//! shares their words:
//!
//! - "I audited the tax module's code", "the tax audit checklist" (an
//!   audit counts when it is someone's: `my tax audit`, `HMRC is
//!   investigating us`);
//! - "the attorney general said on the news", "the lawyer's letter of
//!   demand gives the client until Friday" (a letter counts when someone
//!   receives it, `a letter from my lawyer`, or it is someone's
//!   lawyer's, `my lawyer's letter`, or it is about something,
//!   `an attorney's letter about ...`);
//! - "a kinked garden hose", "work out the kinks in the app" (a kink
//!   counts as someone's, `my kinks`, or as `kinky`, beside a dating
//!   profile or app, or named as BDSM or FetLife).

use regex::Regex;

/// A statement the rules found: the rule that fired, the sensitivity
/// category it gives the record and its byte span in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentFinding {
    /// The id of the rule that fired (`legal.attorney_letter`, ...; see
    /// [`rule_ids`]).
    pub rule: &'static str,
    /// The sensitivity category of the finding (`finances_debt`,
    /// `legal_trouble`, `sexual`).
    pub category: &'static str,
    /// Start byte offset of the matched words.
    pub start: usize,
    /// End byte offset (exclusive).
    pub end: usize,
}

/// Each rule: its id (`<category>.<name>`, stable: findings carry it),
/// the sensitivity category it gives and its pattern. Case-insensitive;
/// `’` and `'` both count as apostrophes.
const STATEMENTS: &[(&str, &str, &str)] = &[
    // "my tax audit", "a VAT investigation", "the IRS is auditing us".
    (
        "financial.tax_audit",
        "finances_debt",
        r"\b(?:(?:my|our|his|her|their|an?)\s+(?:[\w-]+\s+){0,2}(?:tax|IRS|HMRC|VAT)\s+(?:audit|investigation|enquiry|inquiry)|(?:IRS|HMRC|tax\s+(?:office|man|authorit(?:y|ies)|inspector|department))\s+(?:is|are|was|were|has|have|had)\s+(?:[\w-]+\s+){0,2}(?:auditing|audited|investigating|investigated)\s+(?:me|us|him|her|them|my|our|his|their))\b",
    ),
    // "unreported cash sales", "undeclared income", "off-the-books work".
    (
        "financial.undeclared_income",
        "finances_debt",
        r"\b(?:unreported|undeclared|under-?reported|under-?declared|off[- ]the[- ]books)\s+(?:cash\s+)?(?:cash|income|sales|earnings|tips|revenue|wages|work)\b",
    ),
    // "an attorney's letter about ...", "my lawyer's letter", "a letter
    // from Dana's solicitor".
    (
        "legal.attorney_letter",
        "legal_trouble",
        concat!(
            r"\b(?:(?:(?:my|our|his|her|their|an?)\s+(?:[\w-]+\s+)?(?:attorney|lawyer|solicitor)|(?:attorney|lawyer|solicitor))['’]s\s+letter\s+(?:about|over|regarding|re|threatening|claiming|alleging|accusing|demanding)",
            r"|(?:my|our|his|her|their|an?)\s+(?:[\w-]+\s+)?(?:attorney|lawyer|solicitor)['’]s\s+(?:letter|demand\s+letter|notice)",
            r"|(?:letter|notice|email)\s+from\s+(?:(?:my|our|his|her|their|the|a|an)\s+|\w+['’]s\s+)(?:[\w-]+\s+){0,2}?(?:attorney|lawyer|solicitor|law\s+firm)s?)\b",
        ),
    ),
    // "wrongful termination", "unfairly dismissed", "constructive dismissal".
    (
        "legal.wrongful_termination",
        "legal_trouble",
        r"\b(?:wrongful(?:ly)?|unfair(?:ly)?|constructive(?:ly)?)\s+(?:termination|terminated|dismissal|dismissed|fired|discharge)\b",
    ),
    // A kink beside a dating profile or app, or a dating profile that
    // lists one; BDSM or FetLife named.
    (
        "sexual.kink_profile",
        "sexual",
        concat!(
            r"\b(?:(?:kinky|BDSM|fetish(?:es)?|kinks?[- ](?:friendly|community|scene|dating)|(?:my|her|his|their)\s+kinks?)\b[^.!?\n]{0,80}\b(?:dating|profile|bio|app|Feeld|Tinder|Hinge|OkCupid)",
            r"|(?:dating\s+(?:profile|app|site)|Feeld|Tinder|Hinge|OkCupid|(?:my|her|his|their)\s+(?:profile|bio))\b[^.!?\n]{0,80}\b(?:kinky|kinks?|BDSM|fetish(?:es)?)",
            r"|FetLife|BDSM)\b",
        ),
    ),
];

/// The ids of the rules, in order.
pub fn rule_ids() -> impl Iterator<Item = &'static str> {
    STATEMENTS.iter().map(|s| s.0)
}

/// The rules, compiled once.
pub struct ContentRules {
    rules: Vec<(&'static str, &'static str, Regex)>,
}

impl Default for ContentRules {
    fn default() -> Self {
        Self::new()
    }
}

impl ContentRules {
    /// Compiles the rules.
    pub fn new() -> Self {
        let rules = STATEMENTS
            .iter()
            .map(|&(id, category, pattern)| {
                // The patterns are constants of this module; a bad one is
                // a bug caught by every test.
                let re = Regex::new(&format!("(?i){pattern}")).expect("content pattern compiles");
                (id, category, re)
            })
            .collect();
        Self { rules }
    }

    /// The first statement in the text (the earliest; on a tie, the rule
    /// listed first).
    pub fn find(&self, text: &str) -> Option<ContentFinding> {
        self.rules
            .iter()
            .filter_map(|(rule, category, re)| {
                re.find(text).map(|m| ContentFinding {
                    rule,
                    category,
                    start: m.start(),
                    end: m.end(),
                })
            })
            .min_by_key(|f| f.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(text: &str) -> Option<(&'static str, &'static str)> {
        ContentRules::new().find(text).map(|f| (f.rule, f.category))
    }

    fn misses(rule: &str, texts: &[&str]) {
        let rules = ContentRules::new();
        for t in texts {
            assert_eq!(rules.find(t), None, "{rule} must not fire on {t:?}");
        }
    }

    #[test]
    fn tax_audit_over_unreported_cash_is_found() {
        for t in [
            "We're under a tax audit because of the unreported cash sales at the market stall.",
            "The IRS is auditing us for last year and I am terrified.",
            "My HMRC investigation letter came this morning.",
            "HMRC has started investigating my accounts.",
        ] {
            let (rule, category) = fired(t).unwrap_or_else(|| panic!("nothing in {t:?}"));
            assert!(rule.starts_with("financial."), "{t:?} -> {rule}");
            assert_eq!(category, "finances_debt");
        }
        assert_eq!(
            fired("a few thousand in undeclared income from the café").map(|f| f.0),
            Some("financial.undeclared_income")
        );
    }

    #[test]
    fn tax_audit_near_misses_are_not_found() {
        misses(
            "financial.tax_audit",
            &[
                "I audited the tax module's code before the release.",
                "The tax audit checklist template is on the shared drive.",
                "Read an article about how the IRS audits large companies.",
                "Filed my tax return early this year, all done.",
                "The cash sales at the bake sale came to 140 pounds.",
            ],
        );
    }

    #[test]
    fn attorney_letter_and_wrongful_termination_are_found() {
        for (t, rule) in [
            (
                "Got an attorney's letter about my wrongful termination claim.",
                "legal.attorney_letter",
            ),
            (
                "A letter from Dana's solicitor came today, she wants the flat.",
                "legal.attorney_letter",
            ),
            (
                "My employment lawyer's letter went out to the company on Friday.",
                "legal.attorney_letter",
            ),
            (
                "I was wrongfully terminated after I reported the safety issue.",
                "legal.wrongful_termination",
            ),
            (
                "The tribunal for the unfair dismissal is in March.",
                "legal.wrongful_termination",
            ),
        ] {
            assert_eq!(fired(t), Some((rule, "legal_trouble")), "{t:?}");
        }
    }

    #[test]
    fn attorney_near_misses_are_not_found() {
        misses(
            "legal.attorney_letter",
            &[
                "The attorney general said on the news that the law will change.",
                "The lawyer's letter of demand gives the client until the 24th to pay.",
                "My cousin is studying to be a lawyer.",
                "Watched a courtroom drama about a termination clause.",
                "The contract's termination date is in June.",
            ],
        );
    }

    #[test]
    fn kink_dating_profile_is_found() {
        for t in [
            "Updated my dating profile to say I'm kinky and looking for a dom.",
            "Rewrote my bio on the app: into BDSM, switch, experienced.",
            "Met someone through FetLife last month.",
            "Listed my kinks on the profile so matches know up front.",
        ] {
            let (rule, category) = fired(t).unwrap_or_else(|| panic!("nothing in {t:?}"));
            assert_eq!((rule, category), ("sexual.kink_profile", "sexual"), "{t:?}");
        }
    }

    #[test]
    fn kink_near_misses_are_not_found() {
        misses(
            "sexual.kink_profile",
            &[
                "Replaced a kinked garden hose in the back yard.",
                "We still need to work out the kinks in the schedule.",
                "Updated my LinkedIn profile with the new job.",
                "The dating app ads on the bus are everywhere.",
                "Still working out the kinks in the app before the launch.",
                "Fixed a kink in my profile page's layout.",
            ],
        );
    }
}
