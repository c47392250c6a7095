//! Sensitive content an annotator detected (`sensitive` in an annotation):
//! what it quarantines, the `sensitive` table, the receipt, the summary and
//! the report.

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::common::*;

const SAD: &str =
    "Long day at work. Some nights I don't see the point of any of it. Talked to Sam about it.";
const SAD_QUOTE: &str = "Some nights I don't see the point of any of it.";
const CHEMO: &str = "Chemo starts on the 4th, so I asked Sam to keep answers short.";
const PLAIN: &str = "Sam said: keep answers short. I prefer bullet points.";

/// `sensitive` of an annotation: `quote` found in `text`, with its offsets.
fn detected(category: &str, confidence: f64, text: &str, quote: &str) -> Value {
    let s = text
        .find(quote)
        .unwrap_or_else(|| panic!("{quote:?} not in {text:?}"));
    json!({"category": category, "confidence": confidence, "quote": quote,
           "quote_start": s, "quote_end": s + quote.len(), "detector": "model"})
}

/// An annotation of `text` with one promotable tag and one promotable edge
/// to `user:sam`, carrying `sensitive` when given.
fn annotated(id: &str, text: &str, sensitive: Option<Value>) -> Value {
    let mut a = annotation(
        id,
        vec![tag("preference", 0.95, text, "Sam")],
        vec![edge(id, "relationship", "user:sam", 0.95, text, "Sam")],
        ("sad", 0.9),
        ("medium", 0.9),
    );
    if let Some(s) = sensitive {
        a["sensitive"] = s;
    }
    a
}

fn nodes(env: &Env) {
    env.jsonl(
        "nodes.jsonl",
        &[json!({"id": "user:sam", "kind": "user", "name": "Sam Patel", "aliases": ["Sam"]})],
    );
}

fn quarantined_of<'a>(rows: &'a [Map<String, Value>], id: &str) -> Vec<&'a Map<String, Value>> {
    by(rows, "record_id", id)
}

// A record in which the annotator detected self-harm content had its tags
// and edges promoted: only a producer flag quarantined.
#[test]
fn a_detected_record_has_every_tag_and_edge_quarantined_naming_category_confidence_and_quote() {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", SAD), record("r2", PLAIN)]);
    env.jsonl(
        "annotations.jsonl",
        &[
            annotated(
                "r1",
                SAD,
                Some(detected("mental_health_self_harm", 0.93, SAD, SAD_QUOTE)),
            ),
            annotated("r2", PLAIN, None),
        ],
    );
    let ran = env.run_std(&[]).ok();
    let q = env.table("quarantine");
    let r1 = quarantined_of(&q, "r1");
    assert_eq!(r1.len(), 2, "{q:?}");
    let s = SAD.find(SAD_QUOTE).unwrap();
    let want = format!(
        "sensitive content detected: mental_health_self_harm (confidence 0.93, model) in {SAD_QUOTE:?} at bytes [{s}, {})",
        s + SAD_QUOTE.len()
    );
    for row in &r1 {
        assert_eq!(reasons(row), ["sensitive_boundary_or_safety_record"]);
        assert_eq!(row["detail"].as_str().unwrap(), want);
    }
    let types: Vec<&str> = r1
        .iter()
        .map(|r| r["item_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["tag", "edge"]);
    // Nothing of r1 is promoted; r2 (no detection) is promoted as before.
    let tags = env.table("promoted_tags");
    let edges = env.table("promoted_edges");
    assert!(by(&tags, "record_id", "r1").is_empty());
    assert!(by(&edges, "record_id", "r1").is_empty());
    assert_eq!(by(&tags, "record_id", "r2").len(), 1);
    assert_eq!(by(&edges, "record_id", "r2").len(), 1);
    // The sensitive table, the receipt and the summary line.
    let t = env.table("sensitive");
    assert_eq!(t.len(), 1, "{t:?}");
    let row = &t[0];
    assert_eq!(row["record_id"], "r1");
    assert_eq!(row["persona_id"], "ada");
    assert_eq!(row["record_kind"], "journal");
    assert_eq!(row["source_path"], "journals/r1.md");
    assert_eq!(row["category"], "mental_health_self_harm");
    assert_eq!(row["confidence"], 0.93);
    assert_eq!(row["detector"], "model");
    assert_eq!(row["flags"], json!([]));
    assert_eq!(row["safety"], 1);
    assert_eq!(row["quote"], SAD_QUOTE);
    assert_eq!(row["quote_start"], s);
    assert_eq!(row["quote_end"], s + SAD_QUOTE.len());
    assert_eq!(row["record_text"], SAD);
    assert_eq!(
        row["annotator"].as_str().unwrap(),
        env.receipt()["annotator"]["id"]
    );
    assert_eq!(row["run_id"], env.receipt()["run_id"]);
    assert_eq!(
        env.receipt()["sensitive"],
        json!({"records": 1, "safety_records": 1, "flagged": 0, "by_category": {"mental_health_self_harm": 1}})
    );
    assert!(
        ran.stdout.contains("1 sensitive records (1 safety)"),
        "{}",
        ran.stdout
    );
}

// Sensitive content is never promoted on a technicality: a detection whose
// quote is not verbatim still quarantines, and says so.
#[test]
fn a_detection_with_a_quote_that_is_not_verbatim_still_quarantines_and_says_so() {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", CHEMO)]);
    let mut s = detected("health", 0.8, CHEMO, "Chemo starts on the 4th");
    s["quote_start"] = json!(1);
    env.jsonl("annotations.jsonl", &[annotated("r1", CHEMO, Some(s))]);
    env.run_std(&[]).ok();
    let q = env.table("quarantine");
    assert_eq!(q.len(), 2);
    for row in &q {
        assert_eq!(reasons(row), ["sensitive_boundary_or_safety_record"]);
        let d = row["detail"].as_str().unwrap();
        assert!(d.starts_with("sensitive content detected: health (confidence 0.8, model) in \"Chemo starts on the 4th\" at bytes [1, 23)"), "{d}");
        assert!(d.contains("not verbatim"), "{d}");
    }
    assert_eq!(env.table("sensitive")[0]["safety"], 0);
}

// Below the threshold, a category the policy does not list, or `detect:
// false`: the record's items are promoted exactly as without a detection.
#[test]
fn detections_below_threshold_outside_the_list_or_with_detect_off_are_promoted_as_before() {
    for (policy, confidence) in [
        ("", 0.34),
        (
            "persona_memory_policy:\n  sensitive_content:\n    threshold: 0.9\n",
            0.89,
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    quarantine_categories: [mental_health_self_harm, credentials_pii]\n",
            0.99,
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    quarantine_categories: []\n",
            0.99,
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    detect: false\n",
            0.99,
        ),
    ] {
        let env = Env::new();
        nodes(&env);
        env.write("p.yaml", policy);
        env.jsonl("records.jsonl", &[record("r1", CHEMO)]);
        env.jsonl(
            "annotations.jsonl",
            &[annotated(
                "r1",
                CHEMO,
                Some(detected(
                    "health",
                    confidence,
                    CHEMO,
                    "Chemo starts on the 4th",
                )),
            )],
        );
        let ran = env.run_std(&["--policy", "p.yaml"]).ok();
        assert!(env.table("quarantine").is_empty(), "{policy}");
        assert_eq!(env.table("promoted_tags").len(), 1, "{policy}");
        assert_eq!(env.table("promoted_edges").len(), 1, "{policy}");
        assert!(env.table("sensitive").is_empty(), "{policy}");
        assert_eq!(env.receipt()["sensitive"]["records"], 0, "{policy}");
        assert!(!ran.stdout.contains("sensitive records"), "{}", ran.stdout);
    }
    // At the threshold exactly, it quarantines.
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", CHEMO)]);
    env.jsonl(
        "annotations.jsonl",
        &[annotated(
            "r1",
            CHEMO,
            Some(detected("health", 0.35, CHEMO, "Chemo starts on the 4th")),
        )],
    );
    env.run_std(&[]).ok();
    assert_eq!(env.table("quarantine").len(), 2);
    assert!(env.table("promoted_tags").is_empty());
}

// A producer flag still wins: its detail stays `record is flagged ...`, a
// detection adds its own, and `detect: false` leaves the flag in force.
#[test]
fn a_producer_flag_wins_and_a_detection_on_a_flagged_record_adds_its_detail() {
    for policy in [
        "",
        "persona_memory_policy:\n  sensitive_content:\n    detect: false\n",
    ] {
        let env = Env::new();
        nodes(&env);
        env.write("p.yaml", policy);
        let mut r = record("r1", CHEMO);
        r["flags"] = json!(["safety"]);
        env.jsonl("records.jsonl", &[r]);
        env.jsonl(
            "annotations.jsonl",
            &[annotated(
                "r1",
                CHEMO,
                Some(detected("health", 0.7, CHEMO, "Chemo starts on the 4th")),
            )],
        );
        env.run_std(&["--policy", "p.yaml"]).ok();
        let q = env.table("quarantine");
        assert_eq!(q.len(), 2, "{policy}");
        for row in &q {
            assert_eq!(reasons(row), ["sensitive_boundary_or_safety_record"]);
            let d = row["detail"].as_str().unwrap();
            assert!(d.starts_with("record is flagged safety"), "{d}");
            assert_eq!(
                d.contains("sensitive content detected: health (confidence 0.7, model)"),
                policy.is_empty(),
                "{policy}: {d}"
            );
        }
        let t = env.table("sensitive");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0]["flags"], json!(["safety"]));
        assert_eq!(t[0]["safety"], 1, "a `safety` flag makes a safety record");
        if policy.is_empty() {
            assert_eq!(t[0]["category"], "health");
        } else {
            assert_eq!(t[0]["category"], Value::Null);
            assert_eq!(t[0]["confidence"], Value::Null);
        }
        let s = &env.receipt()["sensitive"];
        assert_eq!(s["records"], 1);
        assert_eq!(s["safety_records"], 1);
        assert_eq!(s["flagged"], 1);
    }
}

// A sensitive record with no tag (abstained) or no annotation at all is still
// a sensitive record: in the table and the receipt.
#[test]
fn abstained_sensitive_records_are_counted_in_the_receipt_and_the_sensitive_table() {
    let env = Env::new();
    let text = "The routing number and login are on the fridge note.";
    let mut flagged = record("r3", PLAIN);
    flagged["flags"] = json!(["sensitive"]);
    env.jsonl(
        "records.jsonl",
        &[record("r1", text), record("r2", PLAIN), flagged],
    );
    let mut a = annotation("r1", vec![], vec![], ("neutral", 0.9), ("low", 0.9));
    a["sensitive"] = json!({"category": "credentials_pii", "confidence": 1.0, "quote": "routing number and login",
        "quote_start": 4, "quote_end": 28, "detector": "rules:password"});
    // r3 has no annotation: abstained, flagged.
    env.jsonl(
        "annotations.jsonl",
        &[
            a,
            annotation("r2", vec![], vec![], ("neutral", 0.9), ("low", 0.9)),
        ],
    );
    let ran = env.run_std(&[]).ok();
    let abstained = env.table("abstained");
    assert_eq!(abstained.len(), 3);
    let t = env.table("sensitive");
    let ids: Vec<&str> = t.iter().map(|r| r["record_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r1", "r3"]);
    assert_eq!(t[0]["category"], "credentials_pii");
    assert_eq!(t[0]["detector"], "rules:password");
    assert_eq!(t[0]["quote"], "routing number and login");
    assert_eq!(t[0]["safety"], 0);
    assert_eq!(t[1]["category"], Value::Null);
    assert_eq!(t[1]["flags"], json!(["sensitive"]));
    assert_eq!(t[1]["safety"], 0);
    assert_eq!(
        env.receipt()["sensitive"],
        json!({"records": 2, "safety_records": 0, "flagged": 1, "by_category": {"credentials_pii": 1}})
    );
    assert!(
        ran.stdout.contains("2 sensitive records (0 safety)"),
        "{}",
        ran.stdout
    );
}

// An annotation naming a category outside the vocabulary quarantines the
// record's items `unparseable_annotation`, naming the field.
#[test]
fn an_unknown_sensitive_category_quarantines_as_unparseable_naming_the_field() {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", CHEMO)]);
    env.jsonl(
        "annotations.jsonl",
        &[annotated(
            "r1",
            CHEMO,
            Some(detected("medical", 0.9, CHEMO, "Chemo starts on the 4th")),
        )],
    );
    env.run_std(&[]).ok();
    let q = env.table("quarantine");
    assert_eq!(q.len(), 2);
    for row in &q {
        assert_eq!(reasons(row), ["unparseable_annotation"]);
        let d = row["detail"].as_str().unwrap();
        assert!(
            d.contains("sensitive.category: `medical` is not a sensitive category"),
            "{d}"
        );
    }
    assert!(env.table("promoted_tags").is_empty());
    assert!(env.table("sensitive").is_empty());
}

fn report_data(html: &str) -> Value {
    let open = r#"<script id="tomlite-data" type="application/json">"#;
    let from = html.find(open).unwrap() + open.len();
    let to = from + html[from..].find("</script>").unwrap();
    serde_json::from_str(&html[from..to]).unwrap()
}

// Safety records are listed first in report.md and report.html, and the
// queue's items carry their record's sensitive category for the filter.
#[test]
fn safety_records_head_the_report_and_queue_items_carry_the_category() {
    let env = Env::new();
    nodes(&env);
    env.jsonl("records.jsonl", &[record("r1", CHEMO), record("r2", SAD)]);
    env.jsonl(
        "annotations.jsonl",
        &[
            annotated(
                "r1",
                CHEMO,
                Some(detected("health", 0.8, CHEMO, "Chemo starts on the 4th")),
            ),
            annotated(
                "r2",
                SAD,
                Some(detected("mental_health_self_harm", 0.93, SAD, SAD_QUOTE)),
            ),
        ],
    );
    env.run_std(&[]).ok();
    let md = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    let title = md.find("# tomlite run").unwrap();
    let safety = md.find("## Safety records").expect(&md);
    assert!(title < safety);
    // Before anything else: the first section after the title.
    let first_other = [
        "Annotator ",
        "| outcome",
        "## Quarantine by reason",
        "## Queue",
    ]
    .iter()
    .map(|n| md.find(n).unwrap())
    .min()
    .unwrap();
    assert!(safety < first_other, "{md}");
    let section = &md[safety..first_other];
    assert!(section.contains("`r2`"), "{section}");
    assert!(
        section.contains("mental\\_health\\_self\\_harm")
            || section.contains("mental_health_self_harm"),
        "{section}"
    );
    assert!(section.contains("0.93"), "{section}");
    assert!(
        section.contains("Some nights I don't see the point of any of it."),
        "{section}"
    );
    assert!(
        !section.contains("`r1`"),
        "r1 is sensitive, not a safety record\n{section}"
    );
    assert!(md.contains("2 sensitive records (1 safety)"), "{md}");

    let html = std::fs::read_to_string(env.latest().join("report.html")).unwrap();
    let safety_at = html.find(r#"<section id="safety""#).unwrap();
    let summary_at = html.find(r#"<section id="summary""#).unwrap();
    assert!(safety_at < summary_at);
    assert!(html.contains(r#"id="filter-sensitive""#));
    let d = report_data(&html);
    assert_eq!(d["safety_total"], 1);
    assert_eq!(d["safety"][0]["record_id"], "r2");
    assert_eq!(d["safety"][0]["category"], "mental_health_self_harm");
    assert_eq!(d["safety"][0]["quote"], SAD_QUOTE);
    let items = d["queue"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    for it in items {
        let want = if it["record_id"] == "r1" {
            "health"
        } else {
            "mental_health_self_harm"
        };
        assert_eq!(it["sensitive"], want, "{it}");
    }
}

// The policy block's keys are checked at load: exit 2 naming the key.
#[test]
fn sensitive_content_keys_are_refused_with_exit_2_naming_the_key() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", PLAIN)]);
    env.jsonl("annotations.jsonl", &[]);
    for (yaml, needle) in [
        (
            "persona_memory_policy:\n  sensitive_content:\n    threshold: 0\n",
            "persona_memory_policy.sensitive_content.threshold: 0 is outside (0, 1]",
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    threshold: 1.5\n",
            "persona_memory_policy.sensitive_content.threshold: 1.5 is outside (0, 1]",
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    quarantine_categories: [health, medical]\n",
            "persona_memory_policy.sensitive_content.quarantine_categories[1]: `medical` is not a sensitive category",
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    detect: maybe\n",
            "persona_memory_policy.sensitive_content.detect",
        ),
        (
            "persona_memory_policy:\n  sensitive_content:\n    threshhold: 0.5\n",
            "unknown field `threshhold`",
        ),
    ] {
        env.write("p.yaml", yaml);
        let ran = env.run_std(&["--policy", "p.yaml"]);
        assert_eq!(ran.code, 2, "{yaml}: {}", ran.stderr);
        assert!(ran.stderr.contains(needle), "{yaml}\n{}", ran.stderr);
        assert!(!env.staging().exists(), "nothing may run on a bad policy");
        let p = env.cmd("policy", &["--policy", "p.yaml"]);
        assert_eq!(p.code, 2, "{yaml}");
    }
    // The defaults are printed, and a changed block reads back.
    let out = env.cmd("policy", &[]).ok().stdout;
    assert!(
        out.contains("  sensitive_content:\n    detect: true\n    threshold: 0.35\n"),
        "{out}"
    );
    env.write(
        "p.yaml",
        "persona_memory_policy:\n  sensitive_content:\n    threshold: 0.5\n    quarantine_categories: []\n",
    );
    let out = env.cmd("policy", &["--policy", "p.yaml"]).ok().stdout;
    assert!(out.contains("threshold: 0.5"), "{out}");
    assert!(out.contains("quarantine_categories: []"), "{out}");
}

// `tomlite merge` sums the shards' sensitive counts.
#[test]
fn merge_sums_the_sensitive_counts_of_its_shards() {
    let env = Env::new();
    nodes(&env);
    let mut records = Vec::new();
    let mut annotations = Vec::new();
    for i in 0..8 {
        let id = format!("r{i}");
        let mut r = record(&id, SAD);
        r["persona_id"] = json!(format!("p{i}"));
        records.push(r);
        let (cat, text) = if i % 2 == 0 {
            ("mental_health_self_harm", SAD_QUOTE)
        } else {
            ("health", "Long day at work.")
        };
        annotations.push(annotated(&id, SAD, Some(detected(cat, 0.9, SAD, text))));
    }
    env.jsonl("records.jsonl", &records);
    env.jsonl("annotations.jsonl", &annotations);
    let mut runs: Vec<PathBuf> = Vec::new();
    let mut per_shard = Vec::new();
    for k in 0..2 {
        let staging = format!("s{k}");
        env.run(&[
            "--input",
            "records.jsonl",
            "--annotations",
            "annotations.jsonl",
            "--nodes",
            "nodes.jsonl",
            "--staging",
            &staging,
            "--shard",
            &format!("{k}/2"),
        ])
        .ok();
        let id = std::fs::read_to_string(env.path(&staging).join("LATEST")).unwrap();
        let dir = env.path(&staging).join("runs").join(id.trim());
        let receipt: Value =
            serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
        per_shard.push(receipt["sensitive"]["records"].as_u64().unwrap());
        runs.push(dir);
    }
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");
    assert_eq!(per_shard.iter().sum::<u64>(), 8);
    let ran = env
        .cmd(
            "merge",
            &[
                "--staging",
                "merged",
                "--nodes",
                "nodes.jsonl",
                runs[0].to_str().unwrap(),
                runs[1].to_str().unwrap(),
            ],
        )
        .ok();
    assert!(
        ran.stdout.contains("8 sensitive records (4 safety)"),
        "{}",
        ran.stdout
    );
    let id = std::fs::read_to_string(env.path("merged/LATEST")).unwrap();
    let dir = env.path("merged/runs").join(id.trim());
    let receipt: Value =
        serde_json::from_slice(&std::fs::read(dir.join("receipt.json")).unwrap()).unwrap();
    assert_eq!(
        receipt["sensitive"],
        json!({"records": 8, "safety_records": 4, "flagged": 0, "by_category": {"health": 4, "mental_health_self_harm": 4}})
    );
    assert_eq!(read_table(&dir.join("sensitive.parquet")).len(), 8);
}

/// The sensitive rules run on every record whatever annotated it: the same
/// secrets and a self-harm statement, each with a confident, quoted tag
/// from an annotations file or from raw annotator output, are quarantined
/// as sensitive and never promoted, and the receipt names the rules.
#[test]
fn annotations_made_elsewhere_still_get_the_sensitive_rules() {
    let texts = [
        ("x-password", "My bank password is Tr0ub4dor&3 for now."),
        (
            "x-aws",
            "The deploy key is AKIAMXKNMZ2LDJ46S662 in the env.",
        ),
        ("x-pin", "My card PIN 4821 is the same as the gate."),
        ("x-card", "I paid with card 4111 1111 1111 1111 yesterday."),
        ("x-self-harm", "Some nights I want to die."),
    ];
    for raw in [false, true] {
        let env = Env::new();
        let records: Vec<Value> = texts.iter().map(|(id, t)| record(id, t)).collect();
        env.jsonl("records.jsonl", &records);
        let lines: Vec<Value> = texts
            .iter()
            .map(|(id, t)| {
                let a = annotation(
                    id,
                    vec![tag("preference", 0.97, t, t)],
                    vec![],
                    ("neutral", 0.95),
                    ("medium", 0.95),
                );
                if raw {
                    let mut body = a.clone();
                    body.as_object_mut().unwrap().remove("record_id");
                    json!({"record_id": id, "annotator": "llm@1", "raw": body.to_string()})
                } else {
                    a
                }
            })
            .collect();
        env.jsonl("annotations.jsonl", &lines);
        let flag = if raw {
            "--raw-annotations"
        } else {
            "--annotations"
        };
        env.run(&[
            "--input",
            "records.jsonl",
            flag,
            "annotations.jsonl",
            "--staging",
            "staging",
        ])
        .ok();
        assert!(env.table("promoted_tags").is_empty(), "{flag}");
        let quarantine = env.table("quarantine");
        for (id, _) in texts {
            let rows = by(&quarantine, "record_id", id);
            assert!(!rows.is_empty(), "{flag} {id}");
            assert!(
                rows.iter().all(
                    |r| reasons(r).contains(&"sensitive_boundary_or_safety_record".to_string())
                ),
                "{flag} {id}: {rows:?}"
            );
        }
        let detectors = env.receipt()["annotator"]["sensitive_detectors"].clone();
        assert_eq!(detectors, json!(["rules:sensitive-rules-14"]), "{flag}");
    }
}

/// Credentials the keyword rules missed: security answers, a
/// `user / password` pair, a passphrase, a connection string and a
/// password keyword in Spanish, German and French. Each record is
/// quarantined as sensitive with the rule's id as its detector; the
/// look-alikes without a value are promoted as before.
#[test]
fn named_credential_rules_catch_answers_pairs_passphrases_and_foreign_keywords() {
    let secrets = [
        (
            "c-answers",
            "Bank reset: mother's maiden name Ferreira, first pet Chispa.",
            "rules:credential.security_answer",
        ),
        (
            "c-pair",
            "For the NAS, the admin login is root / Summer2024! until Friday.",
            "rules:credential.user_slash_password",
        ),
        (
            "c-phrase",
            "Wallet passphrase is correct horse battery staple, keep it safe.",
            "rules:credential.passphrase_words",
        ),
        (
            "c-conn",
            "Staging DB: postgres://app:S3cr3tPw@db.internal:5432/main",
            "rules:credential.connection_string",
        ),
        (
            "c-es",
            "La contraseña es Girasol#77 para el wifi de casa.",
            "rules:credential.foreign_password_keyword",
        ),
        (
            "c-de",
            "Das Passwort ist Tannenbaum42, nicht vergessen.",
            "rules:credential.foreign_password_keyword",
        ),
        (
            "c-fr",
            "Le mot de passe est soleil2019 pour la banque.",
            "rules:credential.foreign_password_keyword",
        ),
    ];
    let harmless = [
        (
            "h-pet",
            "My first pet died when I was ten; I still miss him.",
        ),
        ("h-login", "The login page is down again, so annoying."),
        (
            "h-phrase",
            "We talked about passphrases and why they beat passwords.",
        ),
    ];
    let env = Env::new();
    let all: Vec<(&str, &str)> = secrets
        .iter()
        .map(|(id, t, _)| (*id, *t))
        .chain(harmless)
        .collect();
    env.jsonl(
        "records.jsonl",
        &all.iter().map(|(id, t)| record(id, t)).collect::<Vec<_>>(),
    );
    let lines: Vec<Value> = all
        .iter()
        .map(|(id, t)| {
            annotation(
                id,
                vec![tag("preference", 0.97, t, t)],
                vec![],
                ("neutral", 0.95),
                ("medium", 0.95),
            )
        })
        .collect();
    env.jsonl("annotations.jsonl", &lines);
    env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let sensitive = env.table("sensitive");
    let quarantine = env.table("quarantine");
    for (id, _, detector) in secrets {
        let rows = by(&sensitive, "record_id", id);
        assert_eq!(rows.len(), 1, "{id}: {sensitive:?}");
        assert_eq!(rows[0]["detector"], detector, "{id}");
        assert!(
            by(&quarantine, "record_id", id)
                .iter()
                .all(|r| reasons(r).contains(&"sensitive_boundary_or_safety_record".to_string())),
            "{id}"
        );
    }
    // The curator sees which rule fired: in the queue's detail and the report.
    let report = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    for (id, _, detector) in secrets {
        assert!(
            by(&quarantine, "record_id", id)
                .iter()
                .all(|r| r["detail"].as_str().unwrap_or("").contains(detector)),
            "{id}: {detector}"
        );
        assert!(
            report.contains(detector),
            "{id}: {detector} not in report.md"
        );
    }
    let promoted = env.table("promoted_tags");
    for (id, _) in harmless {
        assert!(by(&sensitive, "record_id", id).is_empty(), "{id}");
        assert_eq!(by(&promoted, "record_id", id).len(), 1, "{id}");
    }
}

/// A detected credential's value is shown in no staged table and no
/// report: every text of the record's rows has `*` of the same byte length
/// where the value was, the offsets still point at the quote, and the
/// sensitive row and the queue's detail name the kind, the length and a
/// fingerprint. The input file keeps the value.
#[test]
fn detected_secrets_are_masked_in_every_table_and_report() {
    let secret = "Tr0ub4dor&3";
    let text = "Note to self: my bank password is Tr0ub4dor&3 until March.";
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("m1", text)]);
    let quote = "my bank password is Tr0ub4dor&3 until March.";
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "m1",
            vec![tag("preference", 0.97, text, quote)],
            vec![],
            ("neutral", 0.95),
            ("medium", 0.95),
        )],
    );
    env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let stars = "*".repeat(secret.len());
    let quarantine = env.table("quarantine");
    let rows = by(&quarantine, "record_id", "m1");
    assert_eq!(rows.len(), 1, "{quarantine:?}");
    let row = rows[0];
    let staged_text = row["record_text"].as_str().unwrap();
    assert_eq!(staged_text, text.replace(secret, &stars));
    let (s, e) = (
        row["quote_start"].as_u64().unwrap() as usize,
        row["quote_end"].as_u64().unwrap() as usize,
    );
    assert_eq!(&staged_text[s..e], row["source_quote"].as_str().unwrap());
    assert_eq!(&text[s..e], quote);
    let detail = row["detail"].as_str().unwrap();
    assert!(
        detail.contains("masked: password, 11 bytes, sha256:"),
        "{detail}"
    );
    let sensitive = env.table("sensitive");
    assert_eq!(sensitive[0]["record_text"], staged_text);
    assert!(
        sensitive[0]["masked"]
            .as_str()
            .unwrap()
            .starts_with("password, 11 bytes, sha256:")
    );
    // No cell of any table holds the value.
    for table in [
        "promoted_tags",
        "promoted_edges",
        "quarantine",
        "abstained",
        "sensitive",
        "rejects",
    ] {
        for row in env.table(table) {
            for (column, cell) in &row {
                assert!(
                    !cell.to_string().contains(secret),
                    "{table}.{column}: {cell}"
                );
            }
        }
    }
    // No file of the run (reports, receipt, events) holds the value; the
    // input still does.
    for entry in std::fs::read_dir(env.latest()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the secret",
            path.display()
        );
    }
    assert!(
        std::fs::read_to_string(env.path("records.jsonl"))
            .unwrap()
            .contains(secret)
    );
}

/// Sensitive content the model was seen to miss, said in so many words (a
/// tax audit over unreported cash sales, an attorney's letter about a
/// wrongful termination, a kink dating profile), is found by a named rule
/// under any annotator: the record is quarantined, and the `sensitive`
/// table names the rule and the category. Text that only shares their
/// words is promoted.
#[test]
fn tax_audits_attorney_letters_and_kink_profiles_are_found_by_named_rules() {
    let found = [
        (
            "t-audit",
            "Accountant rang: we're facing a tax audit over the market stall's unreported cash sales.",
            "finances_debt",
            "rules:financial.tax_audit",
        ),
        (
            "t-irs",
            "The IRS is auditing us for 2023, all because of the cash jobs.",
            "finances_debt",
            "rules:financial.tax_audit",
        ),
        (
            "t-cash",
            "Nobody knows about the undeclared income from the weekend catering.",
            "finances_debt",
            "rules:financial.undeclared_income",
        ),
        (
            "l-letter",
            "Opened an attorney's letter about my firing from Brightline today.",
            "legal_trouble",
            "rules:legal.attorney_letter",
        ),
        (
            "l-from",
            "A letter from my employment lawyer says the company has 14 days to answer.",
            "legal_trouble",
            "rules:legal.attorney_letter",
        ),
        (
            "l-wrongful",
            "Filed the claim: wrongful termination, they fired me a week after I reported the leak.",
            "legal_trouble",
            "rules:legal.wrongful_termination",
        ),
        (
            "s-profile",
            "Rewrote my dating profile tonight: kinky, switch, looking for someone patient.",
            "sexual",
            "rules:sexual.kink_profile",
        ),
        (
            "s-bdsm",
            "Went to my first BDSM munch with Ria, less scary than I thought.",
            "sexual",
            "rules:sexual.kink_profile",
        ),
        (
            "s-kinks",
            "Listed my kinks on the Feeld profile so nobody is surprised.",
            "sexual",
            "rules:sexual.kink_profile",
        ),
    ];
    let harmless = [
        (
            "h-code",
            "I audited the tax module's code before the release.",
        ),
        (
            "h-ag",
            "The attorney general said on the news that the law will change.",
        ),
        ("h-hose", "Replaced a kinked garden hose in the back yard."),
        (
            "h-kinks",
            "Still working out the kinks in the app before the launch.",
        ),
        (
            "h-demand",
            "The lawyer's letter of demand gives the client until the 24th to pay.",
        ),
    ];
    let env = Env::new();
    let all: Vec<(&str, &str)> = found
        .iter()
        .map(|(id, t, _, _)| (*id, *t))
        .chain(harmless)
        .collect();
    env.jsonl(
        "records.jsonl",
        &all.iter().map(|(id, t)| record(id, t)).collect::<Vec<_>>(),
    );
    let lines: Vec<Value> = all
        .iter()
        .map(|(id, t)| {
            annotation(
                id,
                vec![tag("preference", 0.97, t, t)],
                vec![],
                ("neutral", 0.95),
                ("medium", 0.95),
            )
        })
        .collect();
    env.jsonl("annotations.jsonl", &lines);
    env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let sensitive = env.table("sensitive");
    let quarantine = env.table("quarantine");
    for (id, _, category, detector) in found {
        let rows = by(&sensitive, "record_id", id);
        assert_eq!(rows.len(), 1, "{id}: {sensitive:?}");
        assert_eq!(rows[0]["detector"], detector, "{id}");
        assert_eq!(rows[0]["category"], category, "{id}");
        let queued = by(&quarantine, "record_id", id);
        assert!(!queued.is_empty(), "{id}: not quarantined");
        for r in queued {
            assert!(
                reasons(r).contains(&"sensitive_boundary_or_safety_record".to_string()),
                "{id}: {r:?}"
            );
            assert!(
                r["detail"].as_str().unwrap_or("").contains(detector),
                "{id}: {detector}"
            );
        }
    }
    let promoted = env.table("promoted_tags");
    for (id, _) in harmless {
        assert!(by(&sensitive, "record_id", id).is_empty(), "{id}");
        assert_eq!(by(&promoted, "record_id", id).len(), 1, "{id}");
    }
}

/// The curator's page names the rule that held a record as sensitive: the
/// queue item of a record a named rule found carries `rules:<rule id>`, the
/// card shows it beside the reasons ("held by rule ..."), and a detector
/// written by another annotator reaches the page only as data: JSON-escaped
/// in the page's data, and drawn on the card through the page's escaping.
#[test]
fn the_page_shows_on_each_card_the_rule_that_held_its_record() {
    const AUDIT: &str =
        "Accountant rang: we're facing a tax audit over the market stall's unreported cash sales.";
    const HOSTILE: &str = "rules:x</script><img src=x onerror=alert(1)>\u{202e}";
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[record("t-audit", AUDIT), record("h-chemo", CHEMO)],
    );
    let mut chemo = annotation(
        "h-chemo",
        vec![tag("preference", 0.97, CHEMO, "keep answers short")],
        vec![],
        ("neutral", 0.95),
        ("medium", 0.95),
    );
    let mut found = detected("health", 0.9, CHEMO, "Chemo starts on the 4th");
    found["detector"] = json!(HOSTILE);
    chemo["sensitive"] = found;
    env.jsonl(
        "annotations.jsonl",
        &[
            annotation(
                "t-audit",
                vec![tag("preference", 0.97, AUDIT, AUDIT)],
                vec![],
                ("neutral", 0.95),
                ("medium", 0.95),
            ),
            chemo,
        ],
    );
    env.run(&[
        "--input",
        "records.jsonl",
        "--annotations",
        "annotations.jsonl",
        "--staging",
        "staging",
    ])
    .ok();
    let html = std::fs::read_to_string(env.latest().join("report.html")).unwrap();
    let d = report_data(&html);
    let queue = d["queue"].as_array().unwrap();
    let item = |id: &str| {
        queue
            .iter()
            .find(|it| it["record_id"] == id)
            .unwrap_or_else(|| panic!("{id} not queued: {queue:?}"))
    };
    let audit = item("t-audit");
    assert_eq!(audit["rule"], "rules:financial.tax_audit", "{audit}");
    assert_eq!(audit["sensitive"], "finances_debt", "{audit}");
    assert!(
        audit["reasons"]
            .as_array()
            .unwrap()
            .contains(&json!("sensitive_boundary_or_safety_record")),
        "{audit}"
    );
    assert_eq!(item("h-chemo")["rule"], HOSTILE);
    // In the page's data, the hostile detector's markup is JSON escapes
    // only: no tag of it is written as itself.
    assert!(!html.contains("<img src=x"), "a raw tag in the page");
    assert!(html.contains(r"rules:x\u003c/script\u003e\u003cimg src=x"));

    // The card draws the rule beside the reasons, through the page's inert
    // escaping (HTML escapes, control and bidirectional characters shown).
    let body = |name: &str| {
        let from = html
            .find(&format!("function {name}("))
            .unwrap_or_else(|| panic!("no {name} in the page"));
        let len = html[from..].find("\n}\n").unwrap();
        &html[from..from + len]
    };
    let card = body("cardHTML");
    let chips = card
        .lines()
        .find(|l| l.contains(r#"<div class="chips">"#))
        .expect(card);
    assert!(chips.contains("ruleHTML(it)"), "{chips}");
    let rule = body("ruleHTML");
    assert!(rule.contains("held by rule"), "{rule}");
    assert!(rule.contains("inert(it.rule"), "{rule}");
    assert!(!rule.contains("+ it.rule"), "the rule unescaped: {rule}");
    let inert = body("inert");
    assert!(inert.contains("return esc("), "{inert}");
    assert!(inert.contains(r"\u202a-\u202e"), "{inert}");

    // report.md names the rule on the item's line, as code.
    let md = std::fs::read_to_string(env.latest().join("report.md")).unwrap();
    let line = md
        .lines()
        .find(|l| l.starts_with("- **t-audit#"))
        .expect(&md);
    assert!(
        line.contains("found by `rules:financial.tax_audit`"),
        "{line}"
    );
}
