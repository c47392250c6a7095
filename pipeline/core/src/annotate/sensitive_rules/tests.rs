use super::*;

/// (kind, matched text) for every finding.
fn found(text: &str) -> Vec<(&'static str, String)> {
    Rules::new()
        .find(text)
        .into_iter()
        .map(|f| (f.kind, text[f.start..f.end].to_string()))
        .collect()
}

fn one(kind: &'static str, value: &str) -> Vec<(&'static str, String)> {
    vec![(kind, value.to_string())]
}

// Stated passwords are found, the value only, without trailing punctuation.
#[test]
fn password_stated_with_its_value_is_found() {
    assert_eq!(
        found("the password is hunter2."),
        one("password", "hunter2")
    );
    assert_eq!(found("pw: Tr0ub4dor&3"), one("password", "Tr0ub4dor&3"));
    assert_eq!(
        found("netflix pw is Hazelnut!Otter92 dont change it"),
        one("password", "Hazelnut!Otter92")
    );
    assert_eq!(
        found("login: mara.k / pass: Quokka2024"),
        one("password", "Quokka2024")
    );
    assert_eq!(
        found("wifi password = \"sunflower\""),
        one("password", "sunflower")
    );
    // Other tenses of "is" state a value as well.
    assert_eq!(
        found("my Gmail password has been Tulip!Harbour1987 for nine years"),
        one("password", "Tulip!Harbour1987")
    );
    assert_eq!(
        found("the new PIN will be 7731 from Monday"),
        one("pin", "7731")
    );
    assert_eq!(
        found("his password had been always Kestrel_88 until the breach"),
        one("password", "Kestrel_88")
    );
    // ...and a word after them is still no password.
    assert!(found("the password has been changed twice this month").is_empty());
    assert!(found("your password will be reset on Friday").is_empty());
}

// Exact byte offsets of the value, after multi-byte text.
#[test]
fn finding_offsets_are_byte_offsets_of_the_value() {
    let text = "Bríd’s password is hunter2, ok";
    let f = Rules::new().find(text);
    let start = text.find("hunter2").unwrap();
    assert_eq!(
        f,
        vec![Finding {
            rule: "credential.password",
            kind: "password",
            start,
            end: start + 7
        }]
    );
}

// PINs and door/gate codes with their value are found.
#[test]
fn pin_and_door_codes_stated_with_their_value_are_found() {
    assert_eq!(found("PIN 4821"), one("pin", "4821"));
    assert_eq!(
        found("new card PIN 7392, same as the gym locker"),
        one("pin", "7392")
    );
    assert_eq!(
        found("pin for the new bank card is 0619"),
        one("pin", "0619")
    );
    assert_eq!(found("the code for the gate is 1947#"), one("pin", "1947#"));
    assert_eq!(
        found("14 Alder Close, gate code 4471#, key's under the pot"),
        one("pin", "4471#")
    );
    assert_eq!(
        found("key safe by the back door is 4071, for the carers"),
        one("pin", "4071")
    );
    assert_eq!(found("passcode: 551902"), one("pin", "551902"));
    // A code that releases a child or a parcel to whoever says it.
    assert_eq!(found("Daycare pickup code: 2291."), one("pin", "2291"));
    assert_eq!(
        found("locker collection code is 804417"),
        one("pin", "804417")
    );
}

// Talking about passwords or codes without a value is not a finding.
#[test]
fn password_policy_or_mention_without_value_is_not_a_finding() {
    for text in [
        "passwords need 12 characters",
        "I changed my password",
        "I changed my password yesterday, finally",
        "password policy meeting Thurs: push for passphrases",
        "new wifi password?",
        "the password is at least 16 characters long",
        "pin it to 3.12.2 for now",
        "I'm pinning everything",
        "tax code 1257L",
        "dress code 'garden formal'",
        "the code for the discount is 2024",
        "pass the salt",
        "the PIN is in the letter",
    ] {
        assert_eq!(found(text), vec![], "{text}");
    }
}

// Each API key and token shape is found by its shape alone.
#[test]
fn api_key_shapes_are_found() {
    for key in [
        "sk_live_7zwT1wc0dKbyySerkqGgnrl2",
        "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_51HfLxQ2eZvKYlo2CWxq8Bn3",
        "AKIAMXKNMZ2LDJ46S662",
        "ASIAY34FZKBOKMUTVV7A",
        "ghp_hn3ga21zfMkGxxNcEb2BE3IHfXtY8eERGlEK",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvw",
        "xoxb-955268729004-5286049634166-wxe8fv2je01urwgyN1dWW4jf",
        "AIzaSyD3x9-Kq7LmN2pQ4rS5tU6vW7xY8zA1bC2",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ] {
        let text = format!("pasted {key} here");
        assert_eq!(found(&text), one("api_key", key), "{key}");
    }
}

// A generic "api key"/"token" with a long random value is found; a word is not.
#[test]
fn generic_token_needs_a_high_entropy_value() {
    assert_eq!(
        found("api key: 9fQ2xLr7Vb3kT8mWz1Ye5Hn4"),
        one("api_key", "9fQ2xLr7Vb3kT8mWz1Ye5Hn4")
    );
    assert_eq!(
        found("the token expired_because_of_rotation_policy"),
        vec![]
    );
    assert_eq!(
        found("confused re: where API keys should live (env vars vs vault)"),
        vec![]
    );
    assert_eq!(
        found("AIzaSyD3x9-Kq7LmN2pQ4rS5tU6vW7xY8zA1bC2extra"),
        vec![]
    );
}

// Luhn-valid card numbers with spaces or dashes are found with exact offsets.
#[test]
fn card_numbers_luhn_valid_are_found() {
    let text = "card 4111 1111 1111 1111 exp 09/28";
    let f = Rules::new().find(text);
    assert_eq!(
        f,
        vec![Finding {
            rule: "identifier.card_number",
            kind: "card_number",
            start: 5,
            end: 24
        }]
    );
    assert_eq!(
        found("use 5500-0000-0000-0004 please"),
        one("card_number", "5500-0000-0000-0004")
    );
    assert_eq!(
        found("4111111111111111"),
        one("card_number", "4111111111111111")
    );
}

// A number that fails Luhn, or that its context calls an order, tracking,
// invoice or reference number, or an ISBN, is not a card.
#[test]
fn card_shaped_numbers_that_are_not_cards_are_not_findings() {
    assert_eq!(found("card 4111 1111 1111 1112"), vec![]);
    assert_eq!(found("order 4111 1111 1111 1111 arriving"), vec![]);
    assert_eq!(
        found("tracking # 4111 1111 1111 1111 says delivered"),
        vec![]
    );
    assert_eq!(found("invoice 4111-1111-1111-1111"), vec![]);
    assert_eq!(found("ref 4111111111111111"), vec![]);
    assert_eq!(found("ISBN 978-0-19-881257-3"), vec![]);
    assert_eq!(found("9780198812573"), vec![]);
    assert_eq!(found("tracking 9400 1118 9922 3344 5566 77 stuck"), vec![]);
    assert_eq!(found("on 2025-10-27 at 10:30"), vec![]);
}

#[test]
fn luhn_accepts_valid_and_rejects_changed_digit_and_short() {
    assert!(luhn_valid("4111111111111111"));
    assert!(luhn_valid("5500000000000004"));
    assert!(!luhn_valid("4111111111111121"));
    assert!(!luhn_valid("5500000000000005"));
    assert!(!luhn_valid("0"));
    assert!(!luhn_valid(""));
    assert!(!luhn_valid("4111 1111 1111 1111"));
}

#[test]
fn iban_mod97_accepts_valid_and_rejects_changed_digit() {
    assert!(iban_valid("GB82WEST12345698765432"));
    assert!(iban_valid("DE89370400440532013000"));
    assert!(iban_valid("gb82 west 1234 5698 7654 32"));
    assert!(!iban_valid("GB82WEST12345698765433"));
    assert!(!iban_valid("DE89370400440532013001"));
    assert!(!iban_valid("GB82WEST"));
}

// IBANs, compact or grouped by four, are found only when mod-97 holds.
#[test]
fn ibans_are_found_when_mod97_valid() {
    assert_eq!(
        found("pay into GB82WEST12345698765432 please"),
        one("iban", "GB82WEST12345698765432")
    );
    assert_eq!(
        found("IBAN DE89 3704 0044 0532 0130 00, ref X"),
        one("iban", "DE89 3704 0044 0532 0130 00")
    );
    assert_eq!(
        found("IBAN GB82 WEST 1234 5698 7654 32 BIC"),
        one("iban", "GB82 WEST 1234 5698 7654 32")
    );
    assert_eq!(found("pay into GB82WEST12345698765433 please"), vec![]);
}

#[test]
fn verhoeff_accepts_valid_aadhaar_and_rejects_changed_digit() {
    assert!(verhoeff_valid("2363"));
    assert!(verhoeff_valid("234123412346"));
    assert!(!verhoeff_valid("234123412347"));
    assert!(!verhoeff_valid("234123412336"));
    assert!(!verhoeff_valid("2341 2341 2346"));
}

// Government id shapes are found; invalid SSN areas and bad Aadhaar checks are not.
#[test]
fn government_id_shapes_are_found() {
    assert_eq!(
        found("her SSN, 529-36-7184, to check"),
        one("government_id", "529-36-7184")
    );
    assert_eq!(
        found("NI number JT 48 21 93 B, tax code"),
        one("government_id", "JT 48 21 93 B")
    );
    assert_eq!(found("NI JT482193B"), one("government_id", "JT482193B"));
    assert_eq!(
        found("PAN BKRPM4821L for KYC"),
        one("government_id", "BKRPM4821L")
    );
    assert_eq!(
        found("Aadhaar 2341 2341 2346 here"),
        one("government_id", "2341 2341 2346")
    );
    assert_eq!(
        found("passport number: 533380006"),
        one("government_id", "533380006")
    );
    assert_eq!(
        found("driver's license D1234-56789"),
        one("government_id", "D1234-56789")
    );
    assert_eq!(
        found("licence number is MORGA753116SM9IJ"),
        one("government_id", "MORGA753116SM9IJ")
    );
}

#[test]
fn government_id_lookalikes_are_not_findings() {
    for text in [
        "000-12-3456",
        "666-12-3456",
        "912-34-5678",
        "Aadhaar 2341 2341 2347",
        "GB 12 34 56 A",
        "her passport renewal is taking ages",
        "driver's license expired last week",
        "passport number is on the form",
    ] {
        assert_eq!(found(text), vec![], "{text}");
    }
}

// A personal e-mail is found; role mailboxes and support contexts are not.
#[test]
fn personal_email_is_found_role_addresses_are_not() {
    assert_eq!(
        found("email m.bergqvist58@postmail.co.uk."),
        one("email", "m.bergqvist58@postmail.co.uk")
    );
    for text in [
        "write to support@tallyforge.io",
        "help@larchwoodhomes.co.uk about the warranty",
        "info@x.com, noreply@x.com, sales@x.com, press@x.com",
        "contact@x.com or hello@x.com or team@x.com",
        "their customer service address is jane.doe@bigbank.com",
        "the help desk, it.ops42@corp.example.org",
        "email the office at jo.bloggs@firm.example.com",
    ] {
        assert_eq!(found(text), vec![], "{text}");
    }
}

// Phone numbers in the listed formats are found; public lines are not.
#[test]
fn personal_phone_numbers_are_found() {
    assert_eq!(
        found("his mobile is 07700 900382, don't"),
        one("phone", "07700 900382")
    );
    assert_eq!(
        found("call (555) 013-2233 tonight"),
        one("phone", "(555) 013-2233")
    );
    assert_eq!(
        found("ring her on 555-0142 later"),
        one("phone", "555-0142")
    );
    assert_eq!(
        found("mobile +91 98451 27360."),
        one("phone", "+91 98451 27360")
    );
    assert_eq!(
        found("new number is 087 214 9930, she"),
        one("phone", "087 214 9930")
    );
    assert_eq!(
        found("text +44 7700 900382"),
        one("phone", "+44 7700 900382")
    );
    assert_eq!(
        found("her number: +44 (0)20 7946 0018"),
        one("phone", "+44 (0)20 7946 0018")
    );
    assert_eq!(found("his cell 415 555 0132"), one("phone", "415 555 0132"));
    assert_eq!(found("mobile 98451 27360"), one("phone", "98451 27360"));
    assert_eq!(
        found("just in case: 07700 900382"),
        one("phone", "07700 900382")
    );
}

// Short or space-grouped shapes that are as often scores or amounts
// count as phone numbers only next to a word that says so.
#[test]
fn ambiguous_phone_shapes_need_a_phone_word() {
    assert_eq!(found("scored 112-1345 in the game"), vec![]);
    assert_eq!(found("the 400 000 1000 thing"), vec![]);
    assert_eq!(found("scores 98451 27360"), vec![]);
    assert_eq!(found("we won 3-1 at 7.30, 2024-2025 season"), vec![]);
}

#[test]
fn public_lines_are_not_phone_findings() {
    for text in [
        "Larchwood Rail customer line 0345 600 2211, opens 8am",
        "the support number is 020 7946 0018",
        "helpline 020 7946 0018",
        "the hotline: 555-0142",
        "reception 01632 960983",
        "office line 01632 960983",
        "toll-free 555-0142",
        "call 1-800-555-0199 anytime",
        "0800 048 1190 to ask",
        "customer care number 1800 209 5577",
        "order 88120-4471 arriving",
        "case number 07700 900382",
        "bump to 3.12.4 broke the build",
    ] {
        assert_eq!(found(text), vec![], "{text}");
    }
}

// Findings come back in text order and never overlap.
#[test]
fn findings_are_in_text_order_and_do_not_overlap() {
    let text = "PAN BKRPM4821L, Aadhaar 4821 7390 5524, mobile +91 98451 27360, pw: x9Tq!r2z";
    let f = Rules::new().find(text);
    for w in f.windows(2) {
        assert!(w[0].end <= w[1].start, "{f:?}");
    }
    assert!(f.len() >= 3, "{f:?}");
}

#[derive(serde::Deserialize)]
struct Labeled {
    id: String,
    text: String,
    sensitivity: Label,
}
#[derive(serde::Deserialize)]
struct Label {
    sensitive: bool,
    category: Option<String>,
    quote: Option<String>,
}

// On the labelled sensitivity data, the rules find >= 95 % of the
// credentials_pii records (inside or overlapping the quote) and nothing
// in the hard controls.
#[test]
fn labelled_data_credentials_recall_and_no_control_findings() {
    let rules = Rules::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/sensitivity");
    let (mut pii, mut pii_hit, mut controls) = (0usize, 0usize, 0usize);
    let (mut other, mut other_hit) = (0usize, 0usize);
    let mut missed = Vec::new();
    let mut false_pos = Vec::new();
    for part in ["part-a.jsonl", "part-b.jsonl"] {
        let path = dir.join(part);
        let body =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in body
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let r: Labeled = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
            let found = rules.find(&r.text);
            if !r.sensitivity.sensitive {
                controls += 1;
                if !found.is_empty() {
                    let shown: Vec<_> = found
                        .iter()
                        .map(|f| (f.kind, &r.text[f.start..f.end]))
                        .collect();
                    false_pos.push(format!("{}: {shown:?}", r.id));
                }
            } else if r.sensitivity.category.as_deref() != Some("credentials_pii") {
                // Reported, not asserted: other categories are the model's job.
                other += 1;
                other_hit += usize::from(!found.is_empty());
            } else {
                pii += 1;
                let quote = r.sensitivity.quote.as_deref().unwrap_or("");
                let q = r.text.find(quote).map(|s| (s, s + quote.len()));
                let hit = match q {
                    Some((qs, qe)) => found.iter().any(|f| f.start < qe && f.end > qs),
                    None => !found.is_empty(),
                };
                if hit {
                    pii_hit += 1;
                } else {
                    missed.push(r.id.clone());
                }
            }
        }
    }
    assert!(
        pii >= 20 && controls >= 100,
        "{pii} credentials records, {controls} controls"
    );
    let recall = pii_hit as f64 / pii as f64;
    eprintln!(
        "credentials_pii recall {pii_hit}/{pii} = {recall:.3}; controls with a finding {}/{controls}; \
         other sensitive records with a finding {other_hit}/{other}",
        false_pos.len()
    );
    assert!(recall >= 0.95, "recall {recall:.3}, missed {missed:?}");
    assert!(
        false_pos.is_empty(),
        "controls with findings: {false_pos:?}"
    );
}

// Where a secret is written down is a finding: whoever reads the memory
// knows where to look.
#[test]
fn a_secret_written_down_somewhere_is_found() {
    let kinds = |t: &str| -> Vec<&'static str> { found(t).into_iter().map(|f| f.0).collect() };
    for text in [
        "The routing number and login are on the fridge note.",
        "Dad's PIN is written on a post-it in his wallet.",
        "Mum keeps her online banking password in the address book by the phone.",
        "I wrote the alarm code on the back of the calendar so Jo can get in.",
        "my seed phrase is in a notebook in the desk drawer",
        "Her login details are still taped to the monitor at work.",
        "key safe code's on the pinboard in the hall",
        "Gran jotted down her PIN number on a slip of paper and keeps it with the card.",
        "the password for the school website is in the blue book",
        // Until sensitive-rules-10 this one was a mention without a
        // value; the issue's own example ("the routing number and login
        // are on the fridge note") says where it is written is enough.
        "the password is on the card on the fridge",
        // A negation or a router elsewhere in the sentence is not the
        // secret's.
        "Don't tell anyone, but the safe combination is taped under the desk.",
        "Not ideal, but Dad's PIN is on a post-it in his wallet.",
        "Instead of remembering it, Gran writes her PIN on a slip in her purse.",
        "The router is in the hall and the alarm code is on the back of the calendar.",
        "I put the alarm code on a post-it on the fridge.",
        "Mum stores her passwords in a notebook.",
        "The passwords are written on index cards.",
        "There's a post-it on the monitor with all our passwords.",
        "my pin is on a post-it in my wallet",
    ] {
        assert_eq!(kinds(text), ["written_credential"], "{text}");
    }
    // The finding runs from the secret to the place.
    assert_eq!(
        found("The routing number and login are on the fridge note."),
        one("written_credential", "login are on the fridge")
    );
    // A stated value names the finding.
    assert_eq!(
        found("PIN is 4821 and it's on a post-it in the wallet."),
        one("pin", "4821")
    );
}

// A rule about secrets, a Wi-Fi network's shared password, a sewing
// pin, a password manager, and a secret's word before another noun
// (a reset link, a PIN pad) are not.
#[test]
fn a_rule_a_guest_network_or_a_pin_in_a_drawer_is_not_a_written_secret() {
    for text in [
        "The wifi password is on the fridge.",
        "Guest password is on the card by the kettle.",
        "No passwords are written on sticky notes here.",
        "IT says no more passwords on sticky notes.",
        "Passwords should never be written on post-its.",
        "The pin is in the drawer with the thread.",
        "The password is in the manager now.",
        "The security code is on the back of the card.",
        "I put in the PIN on the card machine and it declined.",
        "The login page is stuck on the loading screen again.",
        "Pinned the map to the noticeboard.",
        "Left my notebook in the car.",
        "The password reset link was in my spam folder.",
        "The login bug is in my notes for standup.",
        "The PIN pad is on the desk by the till.",
        "The door code discussion is in the meeting notes.",
        "The password manager invite is in my work folder.",
        "I keep forgetting my password in the mornings at my desk.",
        "The notebook with the password policy is on my desk.",
    ] {
        assert_eq!(found(text), vec![], "{text}");
    }
}

/// One text per named rule that the rule, and only it, finds: (rule id,
/// text, the words it finds).
const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "financial.tax_audit",
        "we're under a tax audit this spring",
        "a tax audit",
    ),
    (
        "financial.undeclared_income",
        "over the unreported cash sales",
        "unreported cash sales",
    ),
    (
        "legal.attorney_letter",
        "got an attorney's letter about it",
        "an attorney's letter about",
    ),
    (
        "legal.wrongful_termination",
        "my wrongful termination claim",
        "wrongful termination",
    ),
    ("sexual.kink_profile", "met him on FetLife", "FetLife"),
    ("credential.password", "the password is hunter2.", "hunter2"),
    (
        "credential.pass_colon",
        "login: mara.k / pass: Quokka2024",
        "Quokka2024",
    ),
    ("credential.pin", "PIN 4821", "4821"),
    (
        "credential.lock_code",
        "the code for the gate is 1947#",
        "1947#",
    ),
    (
        "credential.written_then_place",
        "The routing number and login are on the fridge note.",
        "login are on the fridge",
    ),
    (
        "credential.writes_down",
        "Gran jotted down her PIN number on a slip of paper.",
        "jotted down her PIN number on a slip",
    ),
    (
        "credential.place_with_secret",
        "There's a post-it on the monitor with all our passwords.",
        "post-it on the monitor with all our passwords.",
    ),
    (
        "credential.own_pin_on_a_note",
        "my pin is on a post-it in my wallet",
        "my pin is on a post-it",
    ),
    (
        "credential.stripe_key",
        "pasted sk_live_7zwT1wc0dKbyySerkqGgnrl2 here",
        "sk_live_7zwT1wc0dKbyySerkqGgnrl2",
    ),
    (
        "credential.aws_key",
        "pasted AKIAMXKNMZ2LDJ46S662 here",
        "AKIAMXKNMZ2LDJ46S662",
    ),
    (
        "credential.github_token",
        "pasted ghp_hn3ga21zfMkGxxNcEb2BE3IHfXtY8eERGlEK here",
        "ghp_hn3ga21zfMkGxxNcEb2BE3IHfXtY8eERGlEK",
    ),
    (
        "credential.slack_token",
        "pasted xoxb-955268729004-5286049634166-wxe8fv2je01urwgyN1dWW4jf here",
        "xoxb-955268729004-5286049634166-wxe8fv2je01urwgyN1dWW4jf",
    ),
    (
        "credential.google_api_key",
        "pasted AIzaSyD3x9-Kq7LmN2pQ4rS5tU6vW7xY8zA1bC2 here",
        "AIzaSyD3x9-Kq7LmN2pQ4rS5tU6vW7xY8zA1bC2",
    ),
    (
        "credential.jwt",
        "pasted eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U here",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    (
        "credential.token_keyword",
        "api key: 9fQ2xLr7Vb3kT8mWz1Ye5Hn4",
        "9fQ2xLr7Vb3kT8mWz1Ye5Hn4",
    ),
    (
        "credential.foreign_password_keyword",
        "La contraseña es Girasol#77.",
        "Girasol#77",
    ),
    (
        "credential.user_slash_password",
        "the admin login is root / Summer2024!",
        "Summer2024!",
    ),
    (
        "credential.passphrase_words",
        "Wallet passphrase is correct horse battery staple.",
        "correct horse battery staple",
    ),
    (
        "credential.connection_string",
        "use postgres://app:S3cr3tPw@db.internal:5432/main for now",
        "S3cr3tPw",
    ),
    (
        "credential.security_answer",
        "Mother's maiden name Ferreira.",
        "Ferreira",
    ),
    (
        "identifier.card_number",
        "use 5500-0000-0000-0004 please",
        "5500-0000-0000-0004",
    ),
    (
        "identifier.iban",
        "pay into GB82WEST12345698765432 please",
        "GB82WEST12345698765432",
    ),
    (
        "identifier.us_ssn",
        "her SSN, 529-36-7184, to check",
        "529-36-7184",
    ),
    (
        "identifier.uk_national_insurance",
        "NI JT482193B",
        "JT482193B",
    ),
    (
        "identifier.india_pan",
        "PAN BKRPM4821L for KYC",
        "BKRPM4821L",
    ),
    (
        "identifier.aadhaar",
        "Aadhaar 2341 2341 2346 here",
        "2341 2341 2346",
    ),
    (
        "identifier.document_number",
        "passport number: 533380006",
        "533380006",
    ),
    (
        "identifier.email",
        "email m.bergqvist58@postmail.co.uk.",
        "m.bergqvist58@postmail.co.uk",
    ),
    (
        "identifier.phone",
        "call (555) 013-2233 tonight",
        "(555) 013-2233",
    ),
    (
        "safety.suicide_named",
        "She told me she'd been having suicidal thoughts.",
        "suicidal",
    ),
    (
        "safety.self_harm_named",
        "Talked to the GP about my self-harm.",
        "self-harm",
    ),
    (
        "safety.self_injury_named",
        "a history of self-injury, she said",
        "self-injury",
    ),
    (
        "safety.overdose_named",
        "My brother overdosed in March.",
        "overdosed",
    ),
    (
        "safety.eating_disorder_named",
        "in recovery from anorexia for two years",
        "anorexia",
    ),
    (
        "safety.kill_or_harm_oneself",
        "I thought I might harm myself.",
        "harm myself",
    ),
    (
        "safety.cutting_oneself",
        "She has been starving herself.",
        "starving herself",
    ),
    (
        "safety.hurting_oneself_on_purpose",
        "I hurt myself on purpose last week.",
        "hurt myself on purpose",
    ),
    (
        "safety.urge_to_harm",
        "had the urge to cut after the call",
        "urge to cut",
    ),
    (
        "safety.relapse_into_self_harm",
        "Relapsed last night, cutting again.",
        "Relapsed last night, cutting",
    ),
    (
        "safety.ending_ones_life",
        "I keep thinking I should end my life.",
        "end my life",
    ),
    (
        "safety.ending_it_all",
        "Some days I just want to end it all.",
        "end it all",
    ),
    (
        "safety.wish_to_die",
        "Some nights I want to die.",
        "want to die",
    ),
    (
        "safety.wish_to_be_dead",
        "I wish I was dead",
        "wish I was dead",
    ),
    (
        "safety.wish_not_to_wake",
        "I wish I wouldn't wake up tomorrow",
        "wish I wouldn't wake up",
    ),
    (
        "safety.not_wanting_to_live",
        "I don't want to be here anymore",
        "don't want to be here anymore",
    ),
    (
        "safety.no_reason_to_live",
        "There's no reason to go on.",
        "no reason to go on",
    ),
    (
        "safety.cannot_go_on",
        "I can't go on like this anymore.",
        "can't go on like this anymore",
    ),
    (
        "safety.better_off_dead",
        "Honestly they'd be better off without me.",
        "better off without me",
    ),
    (
        "safety.never_waking_again",
        "Some nights I pray to never wake up again.",
        "never wake up again",
    ),
    (
        "safety.plans_to_end_it",
        "thinking about killing myself again",
        "thinking about killing myself",
    ),
    ("safety.cutting_again", "Cut again last night.", "Cut again"),
    (
        "safety.someone_cutting_again",
        "I think my brother has started cutting again",
        "my brother has started cutting again",
    ),
    (
        "safety.someone_is_cutting_again",
        "I think she's cutting again.",
        "she's cutting again",
    ),
    (
        "safety.days_without_cutting",
        "I haven't cut myself in 12 days.",
        "I haven't cut myself in 12 days",
    ),
    (
        "safety.clean_from_cutting",
        "Day 21: 3 weeks clean from cutting",
        "weeks clean from cutting",
    ),
    (
        "safety.others_better_off",
        "Honestly everyone would be better off",
        "everyone would be better off",
    ),
    (
        "safety.nobody_would_notice",
        "nobody would notice if I just stopped showing up",
        "nobody would notice if I just stopped showing up",
    ),
    (
        "safety.weighing_again_and_again",
        "weighed myself six times today",
        "weighed myself six times",
    ),
    (
        "safety.sleep_and_not_wake",
        "I'd like to go to sleep and never wake up.",
        "sleep and never wake up",
    ),
    (
        "safety.not_bothering_to_wake",
        "I won't bother waking up tomorrow",
        "won't bother waking up",
    ),
    (
        "safety.someone_sectioned",
        "My sister was sectioned last year.",
        "My sister was sectioned",
    ),
    (
        "safety.named_person_sectioned",
        "Dana was sectioned again.",
        "Dana was sectioned again",
    ),
    (
        "safety.sectioned_under_the_act",
        "The week he was detained under the Mental Health Act.",
        "detained under the Mental Health Act",
    ),
    (
        "safety.psychiatric_hold",
        "She's on a 72-hour hold.",
        "on a 72-hour hold",
    ),
    (
        "safety.psychiatric_ward",
        "He was admitted to a psychiatric ward on Friday.",
        "was admitted to a psychiatric ward",
    ),
    (
        "safety.mental_health_crisis",
        "She had a mental health crisis in June.",
        "a mental health crisis",
    ),
    (
        "safety.not_around",
        "Not like I'll be around for it.",
        "Not like I'll be around",
    ),
    (
        "safety.no_point_in_living",
        "I don't see the point of any of it.",
        "don't see the point of any of it",
    ),
];

/// (rule id, words) of what the rules find in `text`: the safety
/// statement for a `safety.*` example, every finding otherwise.
fn fired(rules: &Rules, id: &str, text: &str) -> Vec<(&'static str, String)> {
    if is_content(id) {
        rules
            .find_content(text)
            .map(|f| (f.rule, text[f.start..f.end].to_string()))
            .into_iter()
            .collect()
    } else if id.starts_with("safety.") {
        rules
            .find_safety(text)
            .map(|f| (f.rule, text[f.start..f.end].to_string()))
            .into_iter()
            .collect()
    } else {
        rules
            .find(text)
            .into_iter()
            .map(|f| (f.rule, text[f.start..f.end].to_string()))
            .collect()
    }
}

/// Whether `id` is a content rule's ([`super::content`]).
fn is_content(id: &str) -> bool {
    super::content::rule_ids().any(|c| c == id)
}

// Each named rule finds its example, and its finding carries its id.
#[test]
fn each_named_rule_finds_its_example_and_names_itself() {
    let rules = Rules::new();
    let mut wrong = Vec::new();
    for &(id, text, words) in EXAMPLES {
        let got = fired(&rules, id, text);
        if got != vec![(id, words.to_string())] {
            wrong.push(format!("{id}: {text:?} -> {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

// Every rule is named once, its id starts with its category, a finding's
// kind is its rule's, and every rule has an example.
#[test]
fn every_rule_has_one_id_a_category_and_an_example() {
    let named = named_rules();
    let mut ids: Vec<&str> = named.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "an id is used twice");
    for r in &named {
        assert_eq!(r.id.split('.').next(), Some(r.category.name()), "{r:?}");
        assert_eq!(r.id.split('.').count(), 2, "{r:?}");
    }
    let mut examples: Vec<&str> = EXAMPLES.iter().map(|e| e.0).collect();
    examples.sort_unstable();
    assert_eq!(examples, ids, "one example per named rule");
    let rules = Rules::new();
    for &(id, text, _) in EXAMPLES
        .iter()
        .filter(|e| !e.0.starts_with("safety.") && !is_content(e.0))
    {
        let kind = named.iter().find(|r| r.id == id).map(|r| r.kind);
        for f in rules.find(text) {
            assert_eq!(Some(f.kind), kind, "{id}: {text}");
        }
    }
    assert_eq!(
        Category::Safety.sensitive_category(),
        crate::vocab::SAFETY_CATEGORY
    );
    assert_eq!(Category::Identifier.sensitive_category(), "credentials_pii");
    // A content rule gives its own category, one of the vocabulary's, and
    // the credential rules find nothing in its example (it is not masked).
    for &(id, text, _) in EXAMPLES.iter().filter(|e| is_content(e.0)) {
        let r = named.iter().find(|r| r.id == id).expect("named");
        let f = rules.find_content(text).expect("found");
        assert_eq!(f.category, r.category.sensitive_category(), "{id}");
        assert!(
            crate::vocab::SENSITIVE_CATEGORIES.contains(&f.category),
            "{id}"
        );
        assert!(rules.find(text).is_empty(), "{id}: {text}");
    }
}
