//! The patterns of the identifier and credential rules
//! ([`super::Rules`]): the shapes of secrets, identifiers and the words
//! around them, as regular expressions.

/// A secret keyword; its named group says which class of value it announces.
pub(super) const SECRET_KEYWORD: &str = concat!(
    r"(?i)\b(?:(?P<pw>passwords?|passwd|passphrase|pwd|pw)",
    r"|(?P<pass>pass)",
    r"|(?P<pin>pin(?:\s+(?:number|no\.?|code))?|passcode|pass\s+code",
    r"|key\s*safe(?:\s+code)?",
    r"|(?:gate|door|alarm|entry|access|lock|keypad|building|garage|locker|padlock|safe|security|wi-?fi|pick-?up|collection)\s+(?:code|combination|combo)|door\s*code)",
    r"|(?P<code>code|combination|combo))\b",
);

/// The verbs that state a secret's value after its keyword ("password is
/// …", "has been …", "PIN will be …"), shared by both value patterns.
macro_rules! states_value {
    () => {
        r"(?:is|was|has[ \t]+been|had[ \t]+been|will[ \t]+be)"
    };
}

/// An adverb that may stand between the verb and the value ("is now …").
macro_rules! value_adverb {
    () => {
        r"(?:(?:now|still|just|always)[ \t]+)?"
    };
}

/// Keyword directly followed by its value: "PIN 4821",
/// "password is hunter2", "password has been Tulip!Harbour1987", "pw: x",
/// "gate code 4471#".
pub(super) const SECRET_VALUE_NO_FILLER: &str = concat!(
    r"^(?P<conn>[ \t]*(?::|=|[-–—])[ \t]*",
    r"|[ \t]+(?:",
    states_value!(),
    r"|=)[ \t]+",
    value_adverb!(),
    r"(?::[ \t]*)?",
    r"|[ \t]*['’]s[ \t]+|[ \t]+)",
    r"(?P<val>[^\s]+)",
);

/// Keyword, a short prepositional phrase, then "is"/":" and the
/// value: "pin for the new bank card is 0619", "the code for the
/// gate is 1947#", "key safe by the back door is 4071".
pub(super) const SECRET_VALUE_WITH_FILLER: &str = concat!(
    r"^(?P<fill>[ \t]+(?:for|on|of|at|by|to|in)(?:[ \t]+[\w'’-]+){1,5}?)",
    r"(?P<conn>[ \t]*(?::|=)[ \t]*|[ \t]+",
    states_value!(),
    r"[ \t]+",
    value_adverb!(),
    r")",
    r"(?P<val>[^\s]+)",
);

/// A secret that is only ever written down to be used: a password or
/// passcode, a login, a PIN (upper case: "the pin is in the drawer" is a
/// sewing pin), a door, alarm or safe code or combination, recovery codes
/// and phrases; several joined by "and" or commas count as one.
macro_rules! written_secret {
    () => {
        concat!(
            r"(?:(?i:pass(?:word|code|phrase)s?|log-?ins?(?:[ \t]+details)?|sign-?in[ \t]+details",
            r"|user[ \t]?names?[ \t]+and[ \t]+passwords?",
            r"|(?:door|alarm|gate|safe|key[ \t]?safe|garage|entry|keypad|lock|padlock|locker)[ \t]+(?:codes?|combinations?|combos?)",
            r"|pin[ \t]+(?:numbers?|codes?)|(?:recovery|backup)[ \t]+(?:codes?|phrases?|keys?)|seed[ \t]+phrases?)",
            r"|PINs?)",
        )
    };
}

/// Up to three words that may stand before a secret or a place: articles,
/// possessives, a few adjectives and a capitalised name ("on the little
/// yellow post-it", "in Dad's old wallet", "her Barclays login"); anything
/// else between a verb and the secret ("keep forgetting my password")
/// breaks the match.
macro_rules! written_modifiers {
    () => {
        concat!(
            r"(?:(?:(?i:the|a|an|my|his|her|our|their|your|its|this|that|all|both|every|each|little|small|old|new|spare|same",
            r"|usual|main|master|yellow|pink|blue|green|red|white|black|kitchen|hall|office|work|bedroom|desk|top|front|inside",
            r"|online|banking|bank|email|e-mail|phone|laptop|computer|account|admin|school|[a-z]+['’]s)|[A-Z][A-Za-z'’-]*)[ \t]+){0,3}",
        )
    };
}

/// A place a secret is written down on or in: a note, a notebook, the
/// fridge, a wallet, a drawer, the back of something.
macro_rules! written_place {
    () => {
        concat!(
            r"(?i:(?:fridge|sticky[ \t]+note|sticky|post-?it|note|notebook|notepad|paper|scrap|slip|card|index[ \t]+card",
            r"|drawer|wallet|purse|keyboard|monitor|whiteboard|envelope|diary|address[ \t]+book",
            r"|calendar|pinboard|noticeboard|cork[ \t]?board|mouse[ \t]?mat|desk|jar|tin|book|folder|binder)s?",
            r"|back[ \t]+of)",
        )
    };
}

/// Words between a verb of being and its preposition ("is written down
/// on", "are all kept in").
macro_rules! written_adverbs {
    () => {
        r"(?:[ \t]+(?i:written|kept|stored|saved|jotted|scribbled|taped|stuck|pinned|hidden|left|down|all|still|now|just|also)){0,2}"
    };
}

/// A preposition of place.
macro_rules! written_preposition {
    () => {
        r"[ \t]+(?i:on|in|inside|under|underneath|behind|to)[ \t]+"
    };
}

/// Secrets, an optional "for …" phrase, a verb, then where they are: "the
/// routing number and login are on the fridge note", "Dad's PIN is
/// written on a post-it in his wallet", "the password for the school
/// website is in the blue book", "key safe code's on the pinboard".
pub(super) const WRITTEN_SECRET_THEN_PLACE: &str = concat!(
    r"\b",
    written_secret!(),
    r"(?:(?:[ \t]*,[ \t]*|[ \t]+(?:and|&)[ \t]+)(?:(?i:the|my|his|her|our|their)[ \t]+)?",
    written_secret!(),
    r")*",
    r"(?:[ \t]+(?i:for|to|of)[ \t]+(?:[^\s.!?,;]+[ \t]+){0,3}?[^\s.!?,;]+)?",
    r"(?:[ \t]+(?i:is|are|was|were|written|kept|stored|saved|jotted|scribbled|taped|stuck|pinned|hidden|left)|['’]s)",
    written_adverbs!(),
    written_preposition!(),
    written_modifiers!(),
    written_place!(),
    r"\b",
);

/// Writing secrets down, then where: "wrote the alarm code on the back of
/// the calendar", "Mum keeps her online banking password in the address
/// book", "Gran jotted down her PIN number on a slip of paper".
pub(super) const WRITES_SECRET_DOWN: &str = concat!(
    r"\b(?i:wrote|writes|write|written|jotted|jots|scribbled|scribbles|keeps|keep|kept|taped|tapes|stuck|sticks",
    r"|hid|hides|left|leaves|put|puts|store|stores|stored|saved|saves)",
    r"(?:[ \t]+(?i:down))?[ \t]+",
    written_modifiers!(),
    written_secret!(),
    r"(?:[ \t]+(?i:down))?",
    written_preposition!(),
    written_modifiers!(),
    written_place!(),
    r"\b",
);

/// A place, then the secrets it holds: "there's a post-it on the monitor
/// with all our passwords", "a notebook listing every login". The secret
/// ends the clause ("the notebook with the password policy" is not one).
pub(super) const PLACE_WITH_SECRET: &str = concat!(
    r"\b(?i:post-?it|sticky[ \t]+note|note|notebook|notepad|card|slip|scrap|paper|envelope|list)s?\b",
    r"[ \t]+(?:[^\s.!?]+[ \t]+){0,4}?(?i:with|has|holds|listing|containing)[ \t]+",
    written_modifiers!(),
    written_secret!(),
    r"\b(?:[ \t]*(?:[.,;:!?)]|\n|$)|[ \t]+(?i:on|in|for|and|inside|written|taped|stuck|from|to|of|at)\b)",
);

/// A lower-case "pin" said to be someone's, on a note, a post-it or in a
/// wallet: "my pin is on a post-it in my wallet" (chat and texts seldom
/// capitalise it; "the pin is in the drawer" stays a sewing pin).
pub(super) const OWN_PIN_ON_A_NOTE: &str = concat!(
    r"\b(?:(?i:my|his|her|their|our|your|bank|card)|[A-Za-z]+['’]s)[ \t]+(?i:pin)(?:[ \t]+(?i:number|code))?",
    r"(?:[ \t]+(?i:is|are|was)|['’]s)",
    written_adverbs!(),
    written_preposition!(),
    written_modifiers!(),
    r"(?i:post-?it|sticky[ \t]+note|sticky|wallet|purse|slip|paper|note|notebook|fridge)s?\b",
);

/// What makes a written-down secret no finding (see [`super::Rules`]'s `written_not`),
/// in the match or the three words before it.
pub(super) const WRITTEN_NOT: &str = concat!(
    r"(?i)\b(?:wi-?fi|guest|router|network|hotspot|no|not|never|don't|don’t|shouldn't|shouldn’t|banned|ban|bans",
    r"|policy|instead|stop|stopped|anymore|dummy|example|fake)\b",
);

/// Shapes of API keys and tokens that need no keyword (Stripe, AWS,
/// GitHub, Slack, Google, JWT).
pub(super) const API_KEY_SHAPES: [(&str, &str); 6] = [
    (
        "credential.stripe_key",
        r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b",
    ),
    ("credential.aws_key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    (
        "credential.github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b",
    ),
    (
        "credential.slack_token",
        r"\bxox[abprs]-[A-Za-z0-9][A-Za-z0-9-]{8,}[A-Za-z0-9]\b",
    ),
    ("credential.google_api_key", r"\bAIza[0-9A-Za-z_-]{35}"),
    (
        "credential.jwt",
        r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    ),
];

/// A word that announces a token or secret key.
pub(super) const TOKEN_KEYWORD: &str = concat!(
    r"(?i)\b(?:api[ _-]?(?:key|token|secret)|access[ _-]?(?:key|token)|secret[ _-]?key",
    r"|client[ _-]?secret|auth[ _-]?token|bearer|token|secret)s?\b",
);

/// A token-like value after a token keyword.
pub(super) const TOKEN_VALUE: &str = r"[A-Za-z0-9_+/=.-]{20,}";

/// 13 to 19 digits, spaces or dashes between them.
pub(super) const CARD_NUMBER: &str = r"\b[0-9](?:[ -]?[0-9]){12,18}\b";

/// An IBAN shape.
pub(super) const IBAN: &str = r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b";

/// A US social security number shape.
pub(super) const US_SSN: &str = r"\b([0-9]{3})-([0-9]{2})-([0-9]{4})\b";

/// A UK National Insurance number.
pub(super) const UK_NATIONAL_INSURANCE: &str =
    r"\b([A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]) ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]\b";

/// An Indian PAN.
pub(super) const INDIA_PAN: &str = r"\b[A-Z]{3}[ABCFGHJLPT][A-Z][0-9]{4}[A-Z]\b";

/// An Aadhaar number, grouped 4-4-4.
pub(super) const AADHAAR: &str = r"\b[2-9][0-9]{3}([ -])[0-9]{4}([ -])[0-9]{4}\b";

/// A passport or driving licence keyword.
pub(super) const DOCUMENT_KEYWORD: &str = concat!(
    r"(?i)\b(?:passport(?:[ \t]+(?:no\.?|number|num|#))?",
    r"|(?:driv(?:er['’]?s|ing)[ \t]+)?licen[cs]e[ \t]+(?:no\.?|number|num|#)",
    r"|driv(?:er['’]?s|ing)[ \t]+licen[cs]e)",
);

/// The document number right after its keyword.
pub(super) const DOCUMENT_VALUE: &str = concat!(
    r"^(?:[ \t]*(?::|#|=|[-–—])[ \t]*|[ \t]+(?:is|was)[ \t]+(?::[ \t]*)?|[ \t]+)",
    r"(?P<val>[A-Za-z0-9][A-Za-z0-9-]{4,19})\b",
);

/// An email address.
pub(super) const EMAIL: &str =
    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b";

/// Phone number shapes.
pub(super) const PHONE: &str = concat!(
    r"\+[0-9]{1,3}(?:[ .-]?\(?[0-9]{1,5}\)?){2,5}",
    r"|\([0-9]{3}\)[ .-]?[0-9]{3}[ .-][0-9]{4}\b",
    r"|\b1[ .-][0-9]{3}[ .-][0-9]{3}[ .-][0-9]{4}\b",
    r"|\b[0-9]{3}[.-][0-9]{3}[.-][0-9]{4}\b",
    r"|\b0[0-9]{2,4}[ -]?[0-9]{3,4}[ -]?[0-9]{3,4}\b",
    r"|\b1[38]00[ -]?[0-9]{3}[ -]?[0-9]{3,4}\b",
    r"|\b[2-9][0-9]{2} [0-9]{3} [0-9]{4}\b",
    r"|\b[6-9][0-9]{4} [0-9]{5}\b",
    r"|\b[0-9]{3}-[0-9]{4}\b",
);

/// Shapes that are as often scores, ranges or amounts as phone
/// numbers: they count only when a word nearby says "phone".
pub(super) const PHONE_WEAK_SHAPES: &str =
    r"^(?:[0-9]{3}-[0-9]{4}|[0-9]{3} [0-9]{3} [0-9]{4}|[0-9]{5} [0-9]{5})$";

/// A word nearby that says "phone".
pub(super) const PHONE_CONTEXT: &str = concat!(
    r"(?i)\b(?:phone|phones|mobile|cell|cellphone|tel|telephone|number|call|calls|called|ring|rang",
    r"|text|texts|sms|whatsapp|signal|reach|dial|landline|fax|contact|digits|line)\b",
);

/// A word nearby that says the number is a reference (order, tracking, ...).
pub(super) const REFERENCE_CONTEXT: &str = concat!(
    r"(?i)\b(?:order|orders|tracking|track|invoice|ref|reference|isbn|receipt|confirmation",
    r"|booking|parcel|shipment|consignment|awb|serial|imei|ticket|(?:case|claim)[ \t]+(?:no|number|ref)|flight",
    r"|policy|membership|customer[ \t]+(?:no|number|id)|account[ \t]+(?:no|number)[ \t]+for[ \t]+the[ \t]+order)\b",
);

/// A word nearby that says the number is a public one (support line, office, ...).
pub(super) const PUBLIC_CONTEXT: &str = concat!(
    r"(?i)\b(?:support|help[ \t-]?lines?|help[ \t-]?desk|hot[ \t-]?lines?",
    r"|customer[ \t]+(?:service|services|care|line|support|helpline|team)",
    r"|reception|switchboard|office[ \t]+(?:line|number|phone|email)|general[ \t]+(?:line|enquiries|inquiries)",
    r"|toll[ \t-]?free|free[ \t-]?phone|enquiries|inquiries|website|public|press[ \t]+office)\b",
);
