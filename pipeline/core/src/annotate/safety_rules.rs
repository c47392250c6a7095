//! Deterministic detection of self-harm and suicidal statements, for the
//! `mental_health_self_harm` category (a safety record).
//!
//! The model decides degree and context; these rules catch what must never
//! be missed when it is said in so many words: a person saying they want
//! to die, to end their life, to hurt themselves on purpose, that others
//! would be better off without them, that they have no reason to go on,
//! or naming suicide, self-harm, an overdose or an eating disorder (or
//! weighing themselves again and again in a day), or a psychiatric crisis
//! (sectioned, on a psychiatric hold, admitted to a psychiatric ward). A
//! missed self-harm record costs more than a quarantined one, so the rules
//! lean to recall within those statements, and stay away from what only
//! sounds like them:
//!
//! - figures of speech: "this commute is killing me", "I could kill for a
//!   coffee", "dying to see it", "dead tired", "I nearly died laughing";
//! - accidents: "I cut myself shaving", "hurt myself at the gym" (harm
//!   counts only when it is deliberate: `self-harm`, `harm myself`,
//!   `cutting myself` as a habit or urge, `hurt myself on purpose`);
//! - "suicide" as a name for something else: a suicide bomber, suicide
//!   squeeze, suicide doors, a suicide run (drill), "suicide mission";
//!   an eating disorder as a topic: a documentary, an awareness fun run,
//!   research.
//!
//! Third-person statements about self-harm ("my brother overdosed", "she
//! talked about ending her life") are safety records too: the record holds
//! someone's crisis either way.

use regex::Regex;

/// A statement the rules found: the rule that fired and its byte span in
/// the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafetyFinding {
    /// The id of the statement that fired (`safety.wish_to_die`, ...; see
    /// [`rule_ids`]).
    pub rule: &'static str,
    /// Start byte offset of the matched words.
    pub start: usize,
    /// End byte offset (exclusive).
    pub end: usize,
}

/// Someone close, by a possessive and their relation to the writer ("my
/// brother", "her flatmate"), `$also` one more relation the statement
/// admits.
macro_rules! someone_close {
    ($also:literal) => {
        concat!(
            r"(?:my|her|his|their|our)\s+(?:brother|sister|son|daughter|friend|partner|wife|husband|girlfriend",
            r"|boyfriend|mum|mom|mother|dad|father|kid|child|niece|nephew|cousin|client|flatmate|roommate|",
            $also,
            ")",
        )
    };
}

/// Statements of wanting to die, of ending one's life, of deliberate
/// self-harm, of others being better off, of having no reason to live:
/// each a named rule (`safety.<name>`, stable: findings carry it) and its
/// pattern. Case-insensitive; `’` and `'` both count as apostrophes.
const STATEMENTS: &[(&str, &str)] = &[
    // Suicide and self-harm named.
    ("safety.suicide_named", r"\bsuicid(?:e|al|ality)\b"),
    ("safety.self_harm_named", r"\bself[- ]?harm(?:ing|ed)?\b"),
    (
        "safety.self_injury_named",
        r"\bself[- ]?injur(?:y|e|ing|ed)\b",
    ),
    ("safety.overdose_named", r"\boverdos(?:e|ed|es|ing)\b"),
    // An eating disorder named: "in recovery from anorexia", "the
    // bulimia", "her eating disorder counsellor".
    (
        "safety.eating_disorder_named",
        r"\b(?:anorexi[ac]|bulimi[ac]|(?:binge[- ])?eating\s+disorders?)\b",
    ),
    (
        "safety.kill_or_harm_oneself",
        r"\b(?:kill|killing|killed|harm|harming|harmed)\s+(?:myself|herself|himself|themselves|themself|yourself)\b",
    ),
    (
        "safety.cutting_oneself",
        r"\b(?:cutting|burning|starving)\s+(?:myself|herself|himself|themselves)\b",
    ),
    (
        "safety.hurting_oneself_on_purpose",
        r"\b(?:cut|cutting|hurt|hurting|burn|burning)\s+(?:myself|herself|himself|themselves)\s+(?:again|on purpose|deliberately)\b",
    ),
    (
        "safety.urge_to_harm",
        r"\b(?:urge|urges|itch|need)\s+to\s+(?:cut|hurt|harm|burn)\b",
    ),
    (
        "safety.relapse_into_self_harm",
        r"\b(?:relapsed?|relapsing)\b[^.!?\n]{0,40}\b(?:cutting|self[- ]?harm)",
    ),
    // Ending one's life.
    (
        "safety.ending_ones_life",
        r"\b(?:end|ending|ended|take|taking|took)\s+(?:my|her|his|their|your)\s+(?:own\s+)?life\b",
    ),
    ("safety.ending_it_all", r"\bend(?:ing)?\s+it\s+all\b"),
    (
        "safety.wish_to_die",
        r"\b(?:want|wanted|wanting|wanna|wish|wished|wishing)\s+(?:to\s+)?(?:just\s+)?(?:die|be\s+dead)\b",
    ),
    (
        "safety.wish_to_be_dead",
        r"\bwish(?:ed)?\s+(?:that\s+)?(?:i|she|he|they)\s+(?:was|were|had\s+been)\s+(?:dead|never\s+born)\b",
    ),
    (
        "safety.wish_not_to_wake",
        r"\b(?:wish|wished|wishing|hope|hoped|hoping)\s+(?:that\s+)?(?:i|she|he|they)\s+(?:just\s+)?(?:would|wouldn[’']?t|won[’']?t|didn[’']?t|don[’']?t|could|never)\s+(?:just\s+)?(?:not\s+)?(?:wake\s+up|disappear)\b",
    ),
    (
        "safety.not_wanting_to_live",
        r"\b(?:don[’']?t|do\s+not|didn[’']?t|doesn[’']?t)\s+want\s+to\s+(?:be\s+(?:here|alive|around)|exist|live|wake\s+up)\s*(?:anymore|any\s+more|at\s+all)?\b",
    ),
    (
        "safety.no_reason_to_live",
        r"\b(?:no|not\s+any|isn[’']?t\s+(?:a|any))\s+(?:reason|point)\s+(?:to|in)\s+(?:live|living|go\s+on|going\s+on|being\s+alive|staying\s+alive|wak(?:e|ing)\s+up)\b",
    ),
    (
        "safety.cannot_go_on",
        r"\bcan[’']?t\s+(?:go\s+on|keep\s+going)\s+(?:like\s+this\s+)?(?:anymore|any\s+more)\b",
    ),
    (
        "safety.better_off_dead",
        r"\bbetter\s+off\s+(?:without\s+(?:me|her|him|them)|dead|if\s+(?:i|she|he|they)\s+(?:was|were|wasn[’']?t|weren[’']?t)\s+(?:gone|here|around|dead|alive))\b",
    ),
    (
        "safety.never_waking_again",
        r"\b(?:not|never)\s+wak(?:e|ing)\s+up\s+(?:again|tomorrow|in\s+the\s+morning)\b",
    ),
    (
        "safety.plans_to_end_it",
        r"\b(?:plan|plans|planned|planning|thought|thoughts|thinking)\s+(?:about|of)\s+(?:killing|ending|hurting)\s+(?:myself|herself|himself|themselves|my\s+life|her\s+life|his\s+life|their\s+life|it\s+all)\b",
    ),
    // Self-harm again: "cut again last night", "I've been cutting again".
    (
        "safety.cutting_again",
        r"(?:^|[\n.!?]\s*|[-•*]\s*|\b(?:i|i[’']ve|i\s+have|she|he|they)\s+(?:been\s+|started\s+)?)cut(?:ting)?\s+again\b",
    ),
    // Someone else's: "she's been cutting again", "my brother has started
    // cutting again" ("cutting" alone: "the budget has been cut again" is
    // not about a person).
    (
        "safety.someone_cutting_again",
        concat!(
            r"(?:\b(?:she|he|they)|\b(?-i:[A-Z][a-z]+)|\b",
            someone_close!("student"),
            r")(?:[’']s|[’']ve|\s+has|\s+have|\s+had)\s+(?:been|started)\s+cutting\s+again\b",
        ),
    ),
    (
        "safety.someone_is_cutting_again",
        r"\b(?:she|he|they)(?:[’']s|[’']re|\s+is|\s+was|\s+are|\s+were)\s+cutting\s+again\b",
    ),
    // Keeping count of days without self-harm, as a recovery log does:
    // "Didn't cut tonight.", "I haven't cut myself in 12 days", "3 weeks
    // clean from cutting", "day 9 cutting-free". The writer's own count:
    // "I" or a sentence or bullet before the verb ("the Fed hasn't cut in
    // 12 months" is not), "cut" with nothing after it but the time
    // ("didn't cut the grass today" has an object), and the time a whole
    // word ("didn't cut today's session short").
    (
        "safety.days_without_cutting",
        r"(?:^|[\n.!?]\s*|[-•*]\s*|\bi\s+|\bi[’']ve\s+)(?:didn[’']?t|did\s+not|managed\s+not\s+to|haven[’']?t|have\s+not|not)\s+cut\s+(?:myself\s+)?(?:tonight|today|yesterday|last\s+night|this\s+(?:week|month)|since\s+\w+|in\s+a\s+while|(?:in|for)\s+(?:over\s+)?(?:\d+|a|an|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a\s+few|several)\s+(?:days?|nights?|weeks?|months?|years?))(?:[\s.,;:!?)]|$)",
    ),
    (
        "safety.clean_from_cutting",
        r"\b(?:days?|weeks?|months?|years?)\s+(?:(?:clean|free)\s+(?:from|of)|without)\s+cutting\b|\bcutting-free\b",
    ),
    // Others better off, nobody noticing: "everyone would be better off",
    // "nobody would notice if I just stopped showing up".
    (
        "safety.others_better_off",
        r"\b(?:everyone|everybody|you\s+all|y(?:ou|a)[’']d\s+all|they[’']d\s+all|the\s+world|my\s+(?:family|kids|parents))\s+(?:would|will|[’']d)?\s*be\s+better\s+off\b",
    ),
    (
        "safety.nobody_would_notice",
        r"\b(?:better\s+off|nobody|no\s+one|no-one)\b[^.!?\n]{0,40}\bif\s+i\s+(?:just\s+)?(?:logged\s+off|disappeared|went\s+away|wasn[’']?t\s+(?:around|here)|weren[’']?t\s+(?:around|here)|stopped\s+(?:existing|showing\s+up|being\s+here))",
    ),
    // Weighing oneself again and again in a day (an eating disorder's
    // checking): "weighed myself six times today", "weigh myself 4x a day".
    (
        "safety.weighing_again_and_again",
        r"\bweigh(?:ed|ing)?\s+myself\b[^.!?\n]{0,40}?\b(?:[3-9]|1\d|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a\s+dozen)\s*(?:times|x)\b",
    ),
    // Going to sleep and not waking up: "some nights I'd quite like to go to
    // sleep and just not bother waking up", "fall asleep and never wake
    // up", "I won't bother waking up tomorrow" (sleeping in, or waking in
    // the night, is not: see `WOKEN`).
    (
        "safety.sleep_and_not_wake",
        r"\b(?:a?sleep|bed)(?:\s+forever)?\s+and\s+(?:just\s+)?(?:not|never)\s+(?:have\s+to\s+|bother(?:ing)?\s+(?:to\s+)?)?wak(?:e|ing)\s+up\b",
    ),
    (
        "safety.not_bothering_to_wake",
        r"\b(?:not|won[’']?t|wouldn[’']?t)\s+bother(?:ing)?\s+(?:to\s+)?wak(?:e|ing)\s+up\b",
    ),
    // A psychiatric crisis in so many words: someone sectioned or detained
    // under the Mental Health Act ("the samples were sectioned", "he should
    // be sectioned for that haircut" and a caesarean are not), put on a
    // psychiatric hold (a bank's 72-hour hold is not), in or admitted to a
    // psychiatric ward (working on one, or a party in its chapel, is not),
    // having a mental health crisis, a crisis team of mental health
    // services.
    (
        "safety.someone_sectioned",
        concat!(
            r"\b(?:i|she|he|they|we|you|",
            someone_close!("patient"),
            r")\s+(?:was|were|got|had\s+been|has\s+been|have\s+been|[’']s\s+been|[’']ve\s+been|[’']d\s+been|is\s+being|[’']s\s+being|[’']m\s+being)\s+sectioned\b",
        ),
    ),
    (
        "safety.named_person_sectioned",
        r"\b(?-i:[A-Z][a-z]+)\s+(?:was|got|has\s+been|had\s+been|[’']s\s+been)\s+sectioned\s+(?:again|last|for|after|under|yesterday|today|this|twice)\b",
    ),
    (
        "safety.sectioned_under_the_act",
        r"\bsectioned\s+under\b|\bsection(?:ing|ed)\s+(?:me|him|her|them)\b|\bdetained\s+under\s+(?:the\s+)?mental\s+health\s+act\b|\bon\s+a\s+section\s+[23]\b",
    ),
    (
        "safety.psychiatric_hold",
        r"\b(?:on|under)\s+(?:a|an)\s+(?:72[- ]?h(?:ou)?r|involuntary|psychiatric|psych|mental\s+health|5150)\s+hold\b|\b5150(?:[’']d|ed)\b",
    ),
    (
        "safety.psychiatric_ward",
        r"\b(?:(?:was|were|been|is|am|got|being|i[’']m|she[’']s|he[’']s|they[’']re)\s+(?:admitted|taken|sectioned)\s+(?:in|into|to)|(?:was|were|been|is|am|i[’']m|she[’']s|he[’']s|they[’']re)\s+(?:in|into)|ended\s+up\s+in|went\s+into|(?:days?|weeks?|months?|nights?)\s+(?:in|on))\s+(?:(?:a|an|the)\s+)?(?:(?:acute|secure|locked|adult|inpatient|closed)\s+)?(?:psych(?:iatric)?\s+(?:ward|unit|hospital)|mental\s+health\s+(?:ward|unit)|mental\s+hospital)(?:[\s.,;:!?)]|$)",
    ),
    (
        "safety.mental_health_crisis",
        r"\b(?:a|my|her|his|their)\s+mental\s+health\s+crisis\b|\b(?:home\s+treatment|mental\s+health\s+crisis|crisis\s+resolution)\s+team\b",
    ),
    // Not being around, the point of it all.
    (
        "safety.not_around",
        r"\bnot\s+like\s+i[’']?ll\s+(?:still\s+)?be\s+(?:around|here)\b",
    ),
    (
        "safety.no_point_in_living",
        r"\bd(?:o|on[’']?)t\s+see\s+(?:the|much|any)\s+point\s+(?:of|in)\s+(?:any\s+of\s+it|anything|it\s+all|living|life|going\s+on|being\s+here)\b",
    ),
];

/// "suicide" naming something else; an eating disorder as a topic.
const NOT_SELF_HARM: &str = r"(?i)\b(?:(?:anorexia|bulimia|eating\s+disorders?)\s+(?:documentar(?:y|ies)|awareness|fundrais(?:er|ers|ing)|fun\s+runs?|research)|suicide\s+(?:bomb(?:er|ers|ing|ings)?|attack(?:s)?|squeeze|doors?|runs?|sprints?|drills?|mission(?:s)?|pact\s+(?:song|album)|squad))\b";

/// What follows "wake up" when someone else is woken, or when it is only
/// sleep: "hope I don't wake up the baby", "don't want to wake up the
/// whole house", "go to bed and not wake up until noon" (a time: "until
/// this is all over" is still a statement), "... for a week", "at 3am
/// again", "every two hours", "early tomorrow", "for the 8am lecture".
const WOKEN: &str = r"(?i)^\s+(?:(?:the|my|your|his|her|their|our|a|an|him|them|us|you|everyone|everybody|anyone|anybody|people|mum|mom|dad|every|early|once|tired|hungover)\b|at\s+(?:\d|(?:night|dawn|midnight|noon|the|some|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b)|(?:until|till|til|[’']til|before)\s+(?:\d|(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b|noon|midday|lunch|lunchtime|dinner|tea|dawn|morning|tomorrow|tonight|the\s+(?:afternoon|weekend|morning|evening|alarm)|(?:mon|tues|wednes|thurs|fri|satur|sun)day|christmas|new\s+year|spring|summer|autumn|winter|next\s+(?:week|month|year))|for\s+(?:(?:a|an|two|three|four|five|six|twelve|\d+)\s+(?:hours?|days?|weeks?|months?)|days|weeks|ages|hours|months|the|my)\b)";

/// The safety statements, compiled once.
pub struct SafetyRules {
    /// Every statement, one alternation in [`STATEMENTS`]' order (the
    /// first that matches at the leftmost place wins).
    statements: Regex,
    /// Each statement alone, to name the one that fired.
    each: Vec<Regex>,
    not_self_harm: Regex,
    woken: Regex,
}

impl Default for SafetyRules {
    fn default() -> Self {
        Self::new()
    }
}

impl SafetyRules {
    /// Compiles the rules.
    pub fn new() -> Self {
        let alternation = STATEMENTS
            .iter()
            .map(|(_, p)| format!("(?:{p})"))
            .collect::<Vec<_>>()
            .join("|");
        SafetyRules {
            statements: Regex::new(&format!("(?i){alternation}"))
                .expect("the safety statements compile"),
            each: STATEMENTS
                .iter()
                .map(|(id, p)| {
                    Regex::new(&format!("(?i)(?:{p})"))
                        .unwrap_or_else(|e| panic!("safety rule {id} compiles: {e}"))
                })
                .collect(),
            not_self_harm: Regex::new(NOT_SELF_HARM).expect("the exclusions compile"),
            woken: Regex::new(WOKEN).expect("the objects of waking compile"),
        }
    }

    /// The first statement in the text, if any.
    pub fn find(&self, text: &str) -> Option<SafetyFinding> {
        self.statements
            .find_iter(text)
            .find(|m| {
                // "suicide bomber" and the like: the exclusion starts where
                // the match does.
                let other = self
                    .not_self_harm
                    .find_at(text, m.start())
                    .is_some_and(|x| x.start() == m.start());
                // Waking someone else up, or sleeping in.
                let words = m.as_str().trim_end();
                let mut last = words.split_whitespace().rev();
                let wake_up = last.next().is_some_and(|w| w.eq_ignore_ascii_case("up"))
                    && last.next().is_some_and(|w| {
                        w.eq_ignore_ascii_case("wake") || w.eq_ignore_ascii_case("waking")
                    });
                let woken = wake_up && self.woken.is_match(&text[m.start() + words.len()..]);
                !other && !woken
            })
            .map(|m| {
                // A statement may start at the end of the sentence before
                // it, or end on the punctuation after it: the finding is
                // its words.
                let words = m.as_str();
                let lead = words.len()
                    - words
                        .trim_start_matches(|c: char| c.is_whitespace() || ".!?".contains(c))
                        .len();
                let trail = words.len()
                    - words
                        .trim_end_matches(|c: char| c.is_whitespace() || ".,;:!?)".contains(c))
                        .len();
                SafetyFinding {
                    rule: self.rule_at(text, m.start(), m.end()),
                    start: m.start() + lead,
                    end: (m.end() - trail).max(m.start() + lead),
                }
            })
    }

    /// The statement that made the alternation's match `start..end`: the
    /// alternation takes the first statement that matches at the leftmost
    /// place, so it is the first that matches there alone.
    fn rule_at(&self, text: &str, start: usize, end: usize) -> &'static str {
        STATEMENTS
            .iter()
            .zip(&self.each)
            .find(|(_, r)| {
                r.find_at(text, start)
                    .is_some_and(|m| m.start() == start && m.end() == end)
            })
            .or_else(|| {
                STATEMENTS
                    .iter()
                    .zip(&self.each)
                    .find(|(_, r)| r.find_at(text, start).is_some_and(|m| m.start() == start))
            })
            .map_or(STATEMENTS[0].0, |((id, _), _)| id)
    }
}

/// Every safety rule's id, in the order the statements are tried.
pub fn rule_ids() -> impl Iterator<Item = &'static str> {
    STATEMENTS.iter().map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Option<&str> {
        SafetyRules::new().find(text).map(|f| &text[f.start..f.end])
    }

    #[test]
    fn statements_of_self_harm_and_suicidal_thoughts_are_found() {
        for (text, words) in [
            ("Some nights I want to die.", "want to die"),
            ("I keep thinking I should end my life.", "end my life"),
            (
                "Honestly they'd be better off without me.",
                "better off without me",
            ),
            (
                "I don't want to be here anymore",
                "don't want to be here anymore",
            ),
            ("i dont want to wake up", "dont want to wake up"),
            ("There's no reason to go on.", "no reason to go on"),
            (
                "Relapsed last night, cutting again.",
                "Relapsed last night, cutting",
            ),
            ("had the urge to cut after the call", "urge to cut"),
            (
                "She told me she'd been having suicidal thoughts.",
                "suicidal",
            ),
            ("My brother overdosed in March.", "overdosed"),
            (
                "I wish I wouldn't wake up tomorrow",
                "wish I wouldn't wake up",
            ),
            ("I wish I was dead", "wish I was dead"),
            (
                "thinking about killing myself again",
                "thinking about killing myself",
            ),
            (
                "I can't go on like this anymore.",
                "can't go on like this anymore",
            ),
            ("Self-harm scars on my arm itch in the heat.", "Self-harm"),
            (
                "I hurt myself on purpose last week.",
                "hurt myself on purpose",
            ),
            ("I just want to end it all", "end it all"),
            ("cut again last night, first time in months", "cut again"),
            ("- Cutting again since the move", "- Cutting again"),
            (
                "everyone would be better off, honestly",
                "everyone would be better off",
            ),
            (
                "nobody would notice if I just stopped showing up",
                "nobody would notice if I just stopped showing up",
            ),
            (
                "it's not like I'll be around for it",
                "not like I'll be around",
            ),
            (
                "some nights I dont see the point of any of it",
                "dont see the point of any of it",
            ),
            (
                "Kasia mentioned she's been cutting again, on her leg.",
                "she's been cutting again",
            ),
            (
                "My brother has started cutting again.",
                "My brother has started cutting again",
            ),
            (
                "they're cutting again, his mum says",
                "they're cutting again",
            ),
            (
                "Kind of hoping I just don't wake up one of these mornings.",
                "hoping I just don't wake up",
            ),
            (
                "weighed myself on the bathroom scale 6 times today",
                "weighed myself on the bathroom scale 6 times",
            ),
            ("weigh myself four times a day", "weigh myself four times"),
            (
                "Petra has been an inpatient twice for anorexia.",
                "anorexia",
            ),
            ("talked about the bulimia instead of circling it", "bulimia"),
            (
                "her old eating disorder counsellor's number",
                "eating disorder",
            ),
            ("Didn't cut tonight.", "Didn't cut tonight"),
            (
                "haven't cut in 12 days, longest since spring",
                "haven't cut in 12 days",
            ),
            ("three weeks clean from cutting", "weeks clean from cutting"),
            ("Day 9 cutting-free.", "cutting-free"),
            (
                "Long walk. Didn't cut myself today. Proud.",
                "Didn't cut myself today",
            ),
            ("I've not cut in 5 days", "I've not cut in 5 days"),
            ("12 days without cutting", "days without cutting"),
            (
                "Some nights I'd quite like to go to sleep and just not bother waking up.",
                "sleep and just not bother waking up",
            ),
            (
                "wouldn't mind not bothering to wake up tbh",
                "not bothering to wake up",
            ),
            (
                "I was sectioned under the Mental Health Act for three weeks",
                "I was sectioned",
            ),
            (
                "She was sectioned off the back of a manic episode.",
                "She was sectioned",
            ),
            (
                "Pete was sectioned again last spring.",
                "Pete was sectioned again",
            ),
            ("They're sectioning him tomorrow.", "sectioning him"),
            (
                "I was detained under the Mental Health Act.",
                "detained under the Mental Health Act",
            ),
            ("They put her on a 72-hour hold.", "on a 72-hour hold"),
            ("They put him on a 72hr hold.", "on a 72hr hold"),
            ("She got 5150'd last night.", "5150'd"),
            (
                "I was admitted to an acute psychiatric ward.",
                "was admitted to an acute psychiatric ward",
            ),
            (
                "After three weeks in a psych ward I'm home.",
                "weeks in a psych ward",
            ),
            ("I ended up in a psych ward.", "ended up in a psych ward"),
            (
                "I'm having a mental health crisis.",
                "a mental health crisis",
            ),
            (
                "I want to fall asleep and not wake up.",
                "asleep and not wake up",
            ),
            (
                "I just want to sleep forever and never wake up.",
                "sleep forever and never wake up",
            ),
            (
                "Some days I want to sleep and never have to wake up.",
                "sleep and never have to wake up",
            ),
            (
                "I won't bother waking up tomorrow.",
                "won't bother waking up",
            ),
            (
                "I don't want to wake up until this is all over.",
                "don't want to wake up",
            ),
            (
                "I wish I could go to sleep and never wake up at all.",
                "sleep and never wake up",
            ),
            (
                "Dev was admitted to the psychiatric ward on Friday.",
                "was admitted to the psychiatric ward",
            ),
            (
                "I spent two weeks on a psych ward last spring",
                "weeks on a psych ward",
            ),
            (
                "The home treatment team rang again this morning.",
                "home treatment team",
            ),
        ] {
            assert_eq!(found(text), Some(words), "{text}");
        }
    }

    #[test]
    fn figures_of_speech_accidents_and_other_suicides_are_not() {
        for text in [
            "This commute is killing me.",
            "I could kill for a coffee right now.",
            "Dying to see the new exhibition!",
            "Dead tired after the gym, hurt myself on the deadlift.",
            "Cut myself shaving this morning, bled everywhere.",
            "I nearly died laughing at the wedding speech.",
            "The news covered the suicide bombing in the capital.",
            "Coach made us do suicide runs until we puked.",
            "The vintage car has suicide doors.",
            "I burned myself on the oven tray.",
            "Killed it at the presentation today.",
            "The deadline is going to be the death of me.",
            "I'd rather die than sit through that meeting again.",
            "The power cut again during the storm.",
            "We'd be better off taking the train.",
            "Had my hair cut again, shorter this time.",
            "I don't see the point of the new reorg.",
            "Nobody would notice if I skipped the standup, so I did.",
            "The budget has been cut again, third year running.",
            "The council has been cutting again: the library closes Mondays.",
            "The company is cutting again, forty jobs this time.",
            "Weighed myself at the gym: down 2 kg since March.",
            "Weighed the flour three times because the scale kept drifting.",
            "I weigh myself once a week, on Mondays.",
            "Watched an anorexia documentary for my psychology essay.",
            "Ran the eating disorder awareness fun run with the office.",
            "Hoping I don't wake up the baby when I get in.",
            "I don't want to wake up the whole house at 5am.",
            "hope I don't wake\n up the neighbours",
            "Didn't cut the grass today, it rained.",
            "Haven't cut my hair in three months.",
            "The grant wasn't cut this year, for once.",
            "Didn't cut it at the audition tonight.",
            "Firefighters spent an hour cutting free the driver.",
            "The Bank of England did not cut this month.",
            "The Fed hasn't cut in 12 months.",
            "The barber didn't cut today.",
            "I didn't cut today's session short.",
            "Keep the board clean from cutting raw chicken.",
            "Going to bed and not waking up until noon, bliss.",
            "I want to go to sleep and never wake up before ten again.",
            "I don't want to wake up until Christmas is over.",
            "Could sleep and not wake up for a week after that shift.",
            "The car park is sectioned off for the market.",
            "The report is sectioned into four parts.",
            "Mum volunteers at the psychiatric hospital shop on Tuesdays.",
            "The PR crisis team met at nine.",
            "The government wants to reform the Mental Health Act.",
            "Hold the door for the porter, psych.",
            "If that trolls you then you need to be admitted to a psych ward",
            "She works in a psychiatric hospital as a nurse.",
            "She was c-sectioned at 38 weeks.",
            "The samples were sectioned at 5 microns and stained.",
            "Hair was sectioned and clipped up before the braids.",
            "He should be sectioned for that haircut lol.",
            "If I hear that song once more I'll get sectioned.",
            "The bank put a 72-hour hold on my deposit.",
            "I'm on the psych ward all week, night shifts.",
            "Back on the psych unit tomorrow for my placement.",
            "Our crew was sent to the psychiatric hospital to fix the boiler.",
            "The party was in the psychiatric hospital's old chapel.",
            "The mental health crisis in schools was on the news.",
            "Some nights I just want to go to bed and not wake up at 3am again.",
            "I want to sleep and not wake up every two hours for once.",
            "Could go to sleep and not wake up for days.",
            "Could sleep and not wake up for twelve hours.",
            "I'll not bother to wake up early tomorrow.",
            "Not bothering to wake up for the 8am lecture.",
            "I hope I don't wake up until noon.",
        ] {
            assert_eq!(found(text), None, "{text}");
        }
    }

    #[test]
    fn an_excluded_use_does_not_hide_a_later_statement() {
        assert_eq!(
            found("After the suicide bombing coverage I felt suicidal myself."),
            Some("suicidal")
        );
    }
}
