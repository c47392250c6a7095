//! The local classifier end to end: the real MiniLM encoder (fetched by
//! `scripts/fetch-model`) and the committed heads, through the CLI.

use serde_json::Value;

use crate::common::*;

fn model_present() {
    let dir = repo().join("models/artifacts/all-MiniLM-L6-v2/model.safetensors");
    assert!(
        dir.is_file(),
        "the encoder is missing: run scripts/fetch-model (CI does) before the tests"
    );
}

#[test]
fn run_annotates_with_the_local_classifier_by_default() {
    model_present();
    let env = Env::new();
    let data = repo().join("data/sample");
    let ran = env.run_sample(&[]).ok();
    assert!(ran.stdout.contains("41 in: 40 processed"), "{}", ran.stdout);
    let receipt = env.receipt();
    // The default is the fine-tuned encoder (models/artifacts/adapters).
    assert!(
        receipt["annotator"]["id"]
            .as_str()
            .unwrap()
            .starts_with("minilm-l6+lora+heads@"),
        "{}",
        receipt["annotator"]["id"]
    );
    assert!(receipt["annotator"]["stats"]["tokens"].as_u64().unwrap() > 0);
    let c = &receipt["counts"];
    assert_eq!(c["processed"], 40);
    let tags = env.table("promoted_tags");
    let quarantine = env.table("quarantine");
    let abstained = env.table("abstained");
    // Every record ends somewhere, and the classifier's quotes are verbatim.
    assert!(!tags.is_empty() || !quarantine.is_empty());
    let records = read_jsonl(&data.join("records.jsonl"));
    for t in &tags {
        let rec = records.iter().find(|r| r["id"] == t["record_id"]).unwrap();
        let text = rec["text"].as_str().unwrap();
        assert_eq!(at_offsets(text, t), t["source_quote"].as_str().unwrap());
        assert!(t["tom_kind_confidence"].as_f64().unwrap() >= 0.80);
    }
    // The flagged records never promote, whatever the model says.
    for id in ["j-010", "s-007"] {
        assert!(by(&tags, "record_id", id).is_empty(), "{id} was promoted");
    }
    for a in &abstained {
        assert_eq!(a["why"], "no_tags");
        assert!(a["best_confidence"].as_f64().unwrap() < 0.5);
    }
    // The second night costs nothing.
    let again = env
        .run(&[
            "--input",
            data.join("records.jsonl").to_str().unwrap(),
            "--staging",
            "staging",
        ])
        .ok();
    assert!(
        again.stdout.contains("0 processed, 40 skipped"),
        "{}",
        again.stdout
    );
}

#[test]
fn annotate_writes_what_run_reads_and_always_gives_affect_and_intensity() {
    model_present();
    let env = Env::new();
    let texts = [
        ("k1", "Please keep answers short and put the code first."),
        ("k2", "Don't message me after 9pm. I mean it."),
        ("k3", "Bus 42 leaves at 08:15 from platform 3."),
    ];
    let rows: Vec<Value> = texts.iter().map(|(id, t)| record(id, t)).collect();
    env.jsonl("records.jsonl", &rows);
    let mut cmd = bin();
    let out = cmd
        .current_dir(env.dir.path())
        .args([
            "annotate",
            "--input",
            "records.jsonl",
            "--out",
            "annotations.jsonl",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tokens/s"), "{stderr}");
    let anns = read_jsonl(&env.path("annotations.jsonl"));
    assert_eq!(anns.len(), 3);
    for (a, (id, text)) in anns.iter().zip(texts) {
        assert_eq!(a["record_id"], id);
        assert!(a["affect"]["label"].is_string() && a["affect"]["confidence"].is_number());
        assert!(a["intensity"]["label"].is_string() && a["intensity"]["confidence"].is_number());
        for t in a["tags"].as_array().unwrap() {
            assert_eq!(at_offsets(text, t), t["source_quote"].as_str().unwrap());
        }
        if a["tags"].as_array().unwrap().is_empty() {
            assert!(a["best_tom_kind"].is_string(), "{a}");
        }
    }
    // The same file goes through the validator like any other annotator's.
    env.run_std(&[]).ok();
    let receipt = env.receipt();
    assert_eq!(receipt["counts"]["processed"], 3);
}

#[test]
fn train_writes_heads_and_a_card_that_eval_and_run_can_use() {
    model_present();
    let env = Env::new();
    let data = repo().join("data/training/tom_lite/part-a.jsonl");
    let train = || env.train_small(&[]);
    let out = train();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let first = std::fs::read(env.path("heads/heads.safetensors")).unwrap();
    let from_cache = "sensitive head and lexical model: read from the cache cache/sensitive-";
    assert!(!stderr.contains(from_cache), "{stderr}");
    assert!(stderr.contains("cross-validated"), "{stderr}");
    // A second run reads the embeddings back and reproduces the same heads.
    // The sensitive model (which no curated decision changes, and whose
    // cross-validation is most of a refit) comes from the cache whole.
    let again = train();
    let stderr2 = String::from_utf8_lossy(&again.stderr);
    assert!(stderr2.contains("read from the cache"), "{stderr2}");
    assert!(stderr2.contains(from_cache), "{stderr2}");
    assert!(!stderr2.contains("cross-validated"), "{stderr2}");
    assert_eq!(
        std::fs::read(env.path("heads/heads.safetensors")).unwrap(),
        first
    );
    // An entry that cannot be read is trained again, to the same heads.
    for e in std::fs::read_dir(env.path("cache")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("sensitive-") && name.ends_with(".json") {
            std::fs::write(&p, "{").unwrap();
        }
    }
    let third = train();
    let stderr3 = String::from_utf8_lossy(&third.stderr);
    assert!(third.status.success(), "{stderr3}");
    assert!(!stderr3.contains(from_cache), "{stderr3}");
    assert_eq!(
        std::fs::read(env.path("heads/heads.safetensors")).unwrap(),
        first
    );
    assert!(stderr.contains("tom_kind: epoch   2 loss"), "{stderr}");
    assert!(stderr.contains("temperatures:"), "{stderr}");
    let card: Value =
        serde_json::from_slice(&std::fs::read(env.path("heads/card.json")).unwrap()).unwrap();
    assert_eq!(
        card["encoder_sha256"],
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    );
    let names: Vec<&str> = card["heads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["spec"]["name"].as_str().unwrap())
        .collect();
    // The sensitive head is trained from data/sensitivity by default.
    assert_eq!(
        names,
        ["tom_kind", "affect", "intensity", "person", "sensitive"]
    );
    let sensitive = &card["heads"][4]["metrics"];
    // Every record of data/sensitivity outside the held-out styles.
    let held_out = ["third_person_memory", "rambling_journal", "voice_memo"];
    let training_records = std::fs::read_dir(repo().join("data/sensitivity"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .filter(|r| !held_out.contains(&r["style"].as_str().unwrap()))
        .count();
    assert!(training_records >= 600, "{training_records}");
    assert_eq!(sensitive["training_records"], training_records);
    assert!(sensitive["out_of_bag"]["recall"].as_f64().unwrap() > 0.5);
    // The lexical model is trained beside the head and measured on the
    // held-out styles.
    assert!(sensitive["lexical_terms"].as_u64().unwrap() > 10_000);
    assert!(sensitive["dev_lexical_only"]["recall"].as_f64().unwrap() > 0.5);
    // Each category's word list is a feature of the lexical model, and
    // the records taught every one of them to point towards sensitive.
    let concepts = sensitive["lexical_concept_weights"].as_object().unwrap();
    assert_eq!(concepts.len(), 9, "{concepts:?}");
    for (category, w) in concepts {
        assert!(w.as_f64().unwrap() > 0.0, "{category}: {w}");
    }
    let edges = &card["edges"];
    assert!(edges["person_min"].as_f64().unwrap() >= 0.5);
    assert!(edges["memory_min_cosine"].as_f64().unwrap() > 0.0);
    for h in card["heads"].as_array().unwrap() {
        assert!(h["temperature"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(card["training_data"]["curated_examples"], 0);
    assert_eq!(
        card["training_data"]["files"]["tom_lite/part-a.jsonl"]
            .as_str()
            .unwrap()
            .len(),
        64
    );

    // eval reads the same heads and reports every head, ECE before/after and the policy view.
    let out = bin()
        .current_dir(env.dir.path())
        .args([
            "eval",
            "--heads-dir",
            "heads",
            "--json",
            "--data",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let set = &report[0];
    assert_eq!(set["records"], 280);
    for head in ["tom_kind", "affect", "intensity"] {
        assert!(set[head]["macro_f1"].is_number(), "{head}");
        assert!(
            set[head]["ece_before"].is_number() && set[head]["ece_after"].is_number(),
            "{head}"
        );
    }
    assert!(set["policy"]["promoted_tags"].is_number());

    // The intensity head reads the wording cues (eval above ran it); a
    // card that claims them for a sentence-level head is refused by name.
    assert_eq!(card["heads"][2]["spec"]["wording_cues"], true);
    assert!(card["heads"][0]["spec"].get("wording_cues").is_none());
    assert_eq!(card["training"]["wording_cues"]["version"], 1);
    let mut bad = card.clone();
    bad["heads"][0]["spec"]["wording_cues"] = Value::Bool(true);
    std::fs::write(
        env.path("heads/card.json"),
        serde_json::to_string_pretty(&bad).unwrap(),
    )
    .unwrap();
    let refused = bin()
        .current_dir(env.dir.path())
        .args([
            "eval",
            "--heads-dir",
            "heads",
            "--data",
            data.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("head tom_kind cannot read the wording cues"),
        "{stderr}"
    );
}

#[test]
fn repeated_texts_are_encoded_once_per_night_across_batches() {
    model_present();
    let env = Env::new();
    // Templated texts, repeated over more records than one encoder pass
    // takes (1,024): the second pass finds every text in the run's cache.
    let templates = [
        "Weekly sync: Sam asked for shorter answers with the code first.",
        "Session summary: the deploy failed again and I was frustrated.",
        "Reminder to self: never message the team after 9pm.",
    ];
    let n = 1100;
    let rows: Vec<Value> = (0..n)
        .map(|i| record(&format!("t{i}"), templates[i % templates.len()]))
        .collect();
    env.jsonl("records.jsonl", &rows);
    let ran = env
        .cmd(
            "annotate",
            &["--input", "records.jsonl", "--out", "annotations.jsonl"],
        )
        .ok();
    // 3 texts encoded; 1,021 reused inside the first pass; 76 from the cache.
    assert!(
        ran.stderr
            .contains("3 texts encoded (1021 reused in their batch, 76 from earlier batches)"),
        "{}",
        ran.stderr
    );
    let anns = read_jsonl(&env.path("annotations.jsonl"));
    assert_eq!(anns.len(), n);
    // A cached text is annotated exactly as when it was encoded.
    for (i, a) in anns.iter().enumerate() {
        let first = &anns[i % templates.len()];
        for key in ["tags", "affect", "intensity", "best_tom_kind"] {
            assert_eq!(a[key], first[key], "record {i}, {key}");
        }
    }
}

#[test]
fn precision_is_selectable_and_int8_is_another_annotator() {
    model_present();
    let env = Env::new();
    let rows = [
        record("p1", "Please keep answers short and put the code first."),
        record("p2", "I was so frustrated when the deploy failed again."),
    ];
    env.jsonl("records.jsonl", &rows);
    let mut ids = Vec::new();
    for precision in ["f32", "int8"] {
        let out = format!("{precision}.jsonl");
        env.cmd(
            "annotate",
            &[
                "--precision",
                precision,
                "--input",
                "records.jsonl",
                "--out",
                &out,
            ],
        )
        .ok();
        let anns = read_jsonl(&env.path(&out));
        assert_eq!(anns.len(), 2);
        ids.push(
            anns[0]["annotator"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        for a in &anns {
            assert!(a["affect"]["label"].is_string(), "{a}");
        }
    }
    assert!(ids[0].starts_with("minilm-l6+lora+heads@"), "{ids:?}");
    assert!(ids[1].starts_with("minilm-l6-int8+lora+heads@"), "{ids:?}");
    let bad = env.cmd(
        "annotate",
        &[
            "--precision",
            "fp16",
            "--input",
            "records.jsonl",
            "--out",
            "x.jsonl",
        ],
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("unknown precision `fp16`"),
        "{}",
        bad.stderr
    );
}

// Nobody flags real journals: the local classifier detects sensitive
// content itself (the identifier rules and the sensitive head), writes it
// in `annotate`'s output, and `run` quarantines the record's items and
// counts it; an angry but ordinary record is left alone.
#[test]
fn the_classifier_detects_sensitive_content_without_a_flag() {
    model_present();
    let env = Env::new();
    let texts = [
        (
            "c1",
            "Need to pay the plumber today. Card is 4111 1111 1111 1111, expiry 09/27.",
        ),
        (
            "c2",
            "Gave my guitar to my brother, he should have something of mine. Some nights I don't see the point of any of it anymore.",
        ),
        (
            "c3",
            "The code review was brutal and I'm furious about it. I want the deploy done by Friday.",
        ),
    ];
    let rows: Vec<Value> = texts.iter().map(|(id, t)| record(id, t)).collect();
    env.jsonl("records.jsonl", &rows);
    // The default model: the fine-tuned adapters and their heads, with
    // the sensitive head and its lexical model.
    let out = bin()
        .current_dir(env.dir.path())
        .args([
            "annotate",
            "--input",
            "records.jsonl",
            "--out",
            "annotations.jsonl",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let anns = read_jsonl(&env.path("annotations.jsonl"));
    let sensitive = |i: usize| &anns[i]["sensitive"];
    let card = sensitive(0);
    assert_eq!(card["category"], "credentials_pii", "{card}");
    assert_eq!(card["detector"], "rules:identifier.card_number");
    assert_eq!(card["confidence"], 1.0);
    assert_eq!(card["quote"], "Card is 4111 1111 1111 1111, expiry 09/27.");
    assert_eq!(
        at_offsets(texts[0].1, card),
        card["quote"].as_str().unwrap()
    );
    let safety = sensitive(1);
    assert_eq!(safety["category"], "mental_health_self_harm", "{safety}");
    assert_eq!(safety["detector"], "model");
    assert!(safety["confidence"].as_f64().unwrap() >= 0.35);
    assert!(sensitive(2).is_null(), "{}", anns[2]);
    // The run quarantines every item of the two detected records.
    env.run_std(&[]).ok();
    let receipt = env.receipt();
    assert_eq!(receipt["sensitive"]["records"], 2, "{receipt}");
    assert_eq!(receipt["sensitive"]["safety_records"], 1);
    for t in env.table("promoted_tags") {
        assert_eq!(t["record_id"], "c3", "{t:?}");
    }
    let table = env.table("sensitive");
    let ids: Vec<&str> = table
        .iter()
        .map(|r| r["record_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
}

/// A voice memo transcribed without punctuation is one "sentence" of
/// seventy words: the classifier scores and quotes its passages, so the
/// statement buried in the grocery list is quoted by its own passage (not
/// the whole memo) and every quote is a verbatim span of the text.
#[test]
fn a_run_on_transcript_is_quoted_by_the_passage_that_holds_the_statement() {
    model_present();
    let env = Env::new();
    let text = "okay so quick memo um groceries are eggs oat milk the good bread and bin bags uh and call the garage about the brakes before Friday um honestly I don't want to be here anymore and nobody would even notice uh anyway also remind me to email Fran about the book club pick because I vote for the Ishiguro one this time";
    env.jsonl("records.jsonl", &[record("v1", text)]);
    env.cmd(
        "annotate",
        &["--input", "records.jsonl", "--out", "a.jsonl"],
    )
    .ok();
    let ann = &read_jsonl(&env.path("a.jsonl"))[0];
    let s = &ann["sensitive"];
    assert_eq!(s["category"], "mental_health_self_harm", "{ann}");
    // The head and the rules both find it; either way, the passage.
    assert_eq!(
        s["quote"],
        "uh and call the garage about the brakes before Friday um honestly I don't want to be here anymore and nobody would even notice uh"
    );
    assert_eq!(at_offsets(text, s), s["quote"].as_str().unwrap());
    // Tags and edges quote passages too: verbatim, and never the whole memo.
    let quoted = ann["tags"]
        .as_array()
        .unwrap()
        .iter()
        .chain(ann["edges"].as_array().unwrap());
    for q in quoted {
        let quote = at_offsets(text, q);
        assert_eq!(quote, q["source_quote"].as_str().unwrap(), "{q}");
        assert!(quote.len() < text.len(), "{q}");
        assert!(quote.split_whitespace().count() <= 25, "{q}");
    }
}

/// Writes `rows` to `records.jsonl` and a policy `p.yaml` whose
/// thresholds are 1, so that the model cannot detect anything (its
/// P(sensitive) is a mean of two probabilities under 1); runs `tomlite
/// annotate` with it and returns the annotations: what the rules alone
/// find.
fn annotate_with_the_rules_alone(env: &Env, rows: &[Value]) -> Vec<Value> {
    env.jsonl("records.jsonl", rows);
    env.write(
        "p.yaml",
        "persona_memory_policy:\n  sensitive_content:\n    threshold: 1\n    safety_threshold: 1\n",
    );
    env.cmd(
        "annotate",
        &[
            "--policy",
            "p.yaml",
            "--input",
            "records.jsonl",
            "--out",
            "annotations.jsonl",
        ],
    )
    .ok();
    read_jsonl(&env.path("annotations.jsonl"))
}

/// The self-harm rules stand on their own: with the policy's thresholds at
/// 1 the model cannot detect anything (its P(sensitive) is a mean of two
/// probabilities under 1), yet a stated wish to die is a safety record
/// from a safety rule (`rules:safety.others_better_off`), quoted by its
/// sentence, and the run counts it
/// as one; a figure of speech is left alone.
#[test]
fn a_stated_wish_to_die_is_a_safety_record_from_the_rules_alone() {
    model_present();
    let env = Env::new();
    let texts = [
        (
            "h1",
            "Long week at the depot. Honestly everyone would be better off without me. Might sleep all weekend.",
        ),
        (
            "h2",
            "This commute is killing me and I could kill for a coffee. Sam covered my shift though.",
        ),
    ];
    let rows: Vec<Value> = texts.iter().map(|(id, t)| record(id, t)).collect();
    let anns = annotate_with_the_rules_alone(&env, &rows);
    let safety = &anns[0]["sensitive"];
    assert_eq!(safety["category"], "mental_health_self_harm", "{safety}");
    assert_eq!(safety["detector"], "rules:safety.others_better_off");
    assert_eq!(safety["confidence"], 1.0);
    assert_eq!(
        safety["quote"],
        "Honestly everyone would be better off without me."
    );
    assert_eq!(
        at_offsets(texts[0].1, safety),
        safety["quote"].as_str().unwrap()
    );
    assert!(anns[1]["sensitive"].is_null(), "{}", anns[1]);
    env.run_std(&["--policy", "p.yaml"]).ok();
    let receipt = env.receipt();
    assert_eq!(receipt["sensitive"]["records"], 1, "{receipt}");
    assert_eq!(receipt["sensitive"]["safety_records"], 1);
    for t in env.table("promoted_tags") {
        assert_eq!(t["record_id"], "h2", "{t:?}");
    }
    // With only the general threshold at 1, a safety record is still held
    // to `safety_threshold` (default 0.35): the model's own detection.
    env.write(
        "q.yaml",
        "persona_memory_policy:\n  sensitive_content:\n    threshold: 1\n",
    );
    env.cmd(
        "annotate",
        &[
            "--policy",
            "q.yaml",
            "--input",
            "records.jsonl",
            "--out",
            "q.jsonl",
        ],
    )
    .ok();
    let anns = read_jsonl(&env.path("q.jsonl"));
    let safety = &anns[0]["sensitive"];
    assert_eq!(safety["category"], "mental_health_self_harm", "{safety}");
    assert_eq!(safety["detector"], "model");
    assert!(safety["confidence"].as_f64().unwrap() >= 0.35, "{safety}");
    assert!(anns[1]["sensitive"].is_null(), "{}", anns[1]);
}

/// The rules' eating-disorder, weighing and pickup-code forms through
/// `tomlite annotate`, with the model kept out (thresholds at 1): a named
/// eating disorder and weighing oneself again and again are safety
/// records from their safety rules, a daycare pickup code with its value is
/// `credentials_pii` from `rules:credential.pin`, a login written on a note
/// on the fridge is `credentials_pii` from
/// `rules:credential.written_then_place`, being
/// sectioned and a wish to sleep and not wake up are safety records, each
/// quoted by its sentence at its byte offsets; waking the baby, a
/// documentary, the grass, the guest Wi-Fi's password on the fridge,
/// sleeping in until noon and a car park sectioned off are left alone.
#[test]
fn eating_disorders_weighing_recovery_counts_pickup_codes_and_written_logins_are_found_by_the_rules()
 {
    model_present();
    let env = Env::new();
    let texts = [
        (
            "r1",
            "Dinner with Kit on Friday. She told me she's in recovery from anorexia and buffets are hard.",
            Some((
                "mental_health_self_harm",
                "rules:safety.eating_disorder_named",
                "She told me she's in recovery from anorexia and buffets are hard.",
            )),
        ),
        (
            "r2",
            "Slept badly. Weighed myself on the bathroom scale 6 times today. Rota is up.",
            Some((
                "mental_health_self_harm",
                "rules:safety.weighing_again_and_again",
                "Weighed myself on the bathroom scale 6 times today.",
            )),
        ),
        (
            "r3",
            "Nursery run on Monday. Daycare pickup code: 2291. Bring the wellies.",
            Some((
                "credentials_pii",
                "rules:credential.pin",
                "Daycare pickup code: 2291.",
            )),
        ),
        (
            "r4",
            "Late shift again, hoping I don't wake up the baby when I get in.",
            None,
        ),
        (
            "r5",
            "Watched an anorexia documentary for my psychology essay, due Friday.",
            None,
        ),
        (
            "r6",
            "Long walk with the dog. Didn't cut tonight. Proud-ish.",
            Some((
                "mental_health_self_harm",
                "rules:safety.days_without_cutting",
                "Didn't cut tonight.",
            )),
        ),
        ("r7", "Didn't cut the grass today, it rained.", None),
        (
            "r8",
            "Bills day. The routing number and login are on the fridge note. Rent goes out Friday.",
            Some((
                "credentials_pii",
                "rules:credential.written_then_place",
                "The routing number and login are on the fridge note.",
            )),
        ),
        (
            "r9",
            "Make yourselves at home. The guest wifi password is on the fridge note.",
            None,
        ),
        (
            "r10",
            "Sorry I missed the inspection. I was sectioned under the Mental Health Act for three weeks. Back home now.",
            Some((
                "mental_health_self_harm",
                "rules:safety.someone_sectioned",
                "I was sectioned under the Mental Health Act for three weeks.",
            )),
        ),
        (
            "r11",
            "Mum up at 5 again. Some nights I'd quite like to go to sleep and just not bother waking up. Bins out.",
            Some((
                "mental_health_self_harm",
                "rules:safety.sleep_and_not_wake",
                "Some nights I'd quite like to go to sleep and just not bother waking up.",
            )),
        ),
        (
            "r12",
            "Night shift done. Going to bed and not waking up until noon. The car park is sectioned off for the market.",
            None,
        ),
    ];
    let rows: Vec<Value> = texts.iter().map(|(id, t, _)| record(id, t)).collect();
    let anns = annotate_with_the_rules_alone(&env, &rows);
    assert_eq!(anns.len(), texts.len());
    for ((id, text, want), ann) in texts.iter().zip(&anns) {
        assert_eq!(ann["record_id"], *id);
        let s = &ann["sensitive"];
        match want {
            None => assert!(s.is_null(), "{id}: {s}"),
            Some((category, detector, quote)) => {
                assert_eq!(s["category"], *category, "{id}: {s}");
                assert_eq!(s["detector"], *detector, "{id}: {s}");
                assert_eq!(s["confidence"], 1.0, "{id}: {s}");
                assert_eq!(s["quote"], *quote, "{id}: {s}");
                assert_eq!(at_offsets(text, s), *quote, "{id}");
            }
        }
    }
}

/// f32 on the `amx` path (the default where the CPU has AMX): the tile
/// unit's bf16 × 3 products give the labels, tags, quotes and edges of
/// `gemm`'s f32 products (`TOMLITE_KERNELS=avx2` runs f32 in gemm) with
/// confidences within 1e-3, and the summary line says which ran. On a CPU
/// without AMX, asking for the path is an error naming the variable and
/// the missing feature, and the comparison is reported as skipped.
#[test]
fn f32_on_the_amx_path_annotates_as_gemm_does_or_is_skipped() {
    model_present();
    let env = Env::new();
    let rows: Vec<Value> = [
        ("a1", "Please keep answers short and put the code first."),
        (
            "a2",
            "Honestly I was gutted when the trip got cancelled, but Sam cheered me up.",
        ),
        (
            "a3",
            "I think she assumes I already know about the deadline change.",
        ),
        ("a4", "Booked the dentist for Tuesday at 3."),
    ]
    .iter()
    .map(|(id, t)| record(id, t))
    .collect();
    env.jsonl("records.jsonl", &rows);
    let annotate = |kernels: &str, out: &str| {
        bin()
            .current_dir(env.dir.path())
            .args(["annotate", "--input", "records.jsonl", "--out", out])
            .env("TOMLITE_KERNELS", kernels)
            .output()
            .unwrap()
    };
    let amx = annotate("amx", "amx.jsonl");
    let stderr = String::from_utf8_lossy(&amx.stderr);
    if !amx.status.success() {
        assert_eq!(amx.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("TOMLITE_KERNELS=amx: this CPU lacks"),
            "{stderr}"
        );
        eprintln!("skipped: f32 on the amx path (this CPU lacks AMX)");
        return;
    }
    assert!(stderr.contains("; kernels f32 amx bf16x3"), "{stderr}");
    let gemm = annotate("avx2", "gemm.jsonl");
    let stderr = String::from_utf8_lossy(&gemm.stderr);
    assert!(gemm.status.success(), "{stderr}");
    assert!(stderr.contains("; kernels f32 gemm "), "{stderr}");
    let read = |name: &str| -> Vec<Value> {
        std::fs::read_to_string(env.path(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (a, g) = (read("amx.jsonl"), read("gemm.jsonl"));
    assert_eq!(a.len(), rows.len());
    // Every number within 1e-3, every string and key equal.
    fn close(a: &Value, b: &Value, at: &str) {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!((x - y).abs() <= 1e-3, "{at}: {x} vs {y}");
            }
            (Value::Array(x), Value::Array(y)) => {
                assert_eq!(x.len(), y.len(), "{at}: lengths differ");
                for (i, (x, y)) in x.iter().zip(y).enumerate() {
                    close(x, y, &format!("{at}[{i}]"));
                }
            }
            (Value::Object(x), Value::Object(y)) => {
                assert_eq!(
                    x.keys().collect::<Vec<_>>(),
                    y.keys().collect::<Vec<_>>(),
                    "{at}: keys differ"
                );
                for (k, v) in x {
                    close(v, &y[k], &format!("{at}.{k}"));
                }
            }
            _ => assert_eq!(a, b, "{at}"),
        }
    }
    for (a, g) in a.iter().zip(&g) {
        close(a, g, a["record_id"].as_str().unwrap());
    }
    assert!(
        a.iter().any(|r| !r["tags"].as_array().unwrap().is_empty()),
        "no record was tagged: the comparison would be empty"
    );
}

/// The int8 kernels are chosen at run time: `TOMLITE_KERNELS=portable`
/// forces the portable path and gives byte-identical annotations, the
/// summary line names the path that ran, and a name that is not a path is
/// a configuration error naming the variable.
#[test]
fn tomlite_kernels_forces_a_path_with_the_same_annotations_or_fails_naming_itself() {
    model_present();
    let env = Env::new();
    let rows: Vec<Value> = [
        ("k1", "Please keep answers short and put the code first."),
        ("k2", "Don't message me after 9pm. I mean it."),
    ]
    .iter()
    .map(|(id, t)| record(id, t))
    .collect();
    env.jsonl("records.jsonl", &rows);
    let annotate = |kernels: Option<&str>, out: &str| {
        let mut cmd = bin();
        cmd.current_dir(env.dir.path()).args([
            "annotate",
            "--precision",
            "int8",
            "--input",
            "records.jsonl",
            "--out",
            out,
        ]);
        match kernels {
            Some(k) => cmd.env("TOMLITE_KERNELS", k),
            None => cmd.env_remove("TOMLITE_KERNELS"),
        };
        cmd.output().unwrap()
    };
    let detected = annotate(None, "detected.jsonl");
    let portable = annotate(Some("portable"), "portable.jsonl");
    for out in [&detected, &portable] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stderr = String::from_utf8_lossy(&portable.stderr);
    assert!(stderr.contains("; kernels int8 portable"), "{stderr}");
    let stderr = String::from_utf8_lossy(&detected.stderr);
    assert!(stderr.contains("; kernels int8 "), "{stderr}");
    assert_eq!(
        std::fs::read(env.path("detected.jsonl")).unwrap(),
        std::fs::read(env.path("portable.jsonl")).unwrap(),
        "the portable path changed the int8 annotations"
    );
    let bad = annotate(Some("avx1024"), "bad.jsonl");
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("TOMLITE_KERNELS=\"avx1024\" is not a kernel path"),
        "{stderr}"
    );
}

/// `tomlite eval ARGS --json` and `tomlite eval ARGS` in `env`: the JSON
/// report and the summary, each run checked to succeed.
fn eval_both(env: &Env, args: &[&str]) -> (Value, String) {
    let run = |json: bool| {
        let mut cmd = bin();
        cmd.current_dir(env.dir.path()).arg("eval").args(args);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    (
        serde_json::from_slice(&run(true)).unwrap(),
        String::from_utf8(run(false)).unwrap(),
    )
}

// `eval` breaks its figures down by the records' style: each style's
// counts and how often each field is right, in JSON and in the summary;
// records without a style are in the totals only.
#[test]
fn eval_reports_each_style_of_its_records() {
    model_present();
    let env = Env::new();
    let styled = read_jsonl(&repo().join("data/training/styles/part-a.jsonl"));
    let of_style =
        |s: &str| -> Vec<&Value> { styled.iter().filter(|r| r["style"] == s).take(7).collect() };
    let (bullets, chats) = (of_style("bullet_session"), of_style("chat_excerpt"));
    let plain = read_jsonl(&repo().join("data/training/tom_lite/part-a.jsonl"));
    let lines: Vec<String> = bullets
        .iter()
        .chain(&chats)
        .copied()
        .chain(plain.iter().take(5))
        .map(|r| r.to_string())
        .collect();
    let data = env.write("styled.jsonl", lines.join("\n") + "\n");
    let (report, text) = eval_both(&env, &["--data", data.to_str().unwrap()]);
    let set = &report[0];
    assert_eq!(set["records"], 19);
    let styles = set["by_style"].as_object().unwrap();
    assert_eq!(
        styles.keys().collect::<Vec<_>>(),
        ["bullet_session", "chat_excerpt"]
    );
    let mut right = 0.0;
    for (style, records) in [("bullet_session", &bullets), ("chat_excerpt", &chats)] {
        let m = &styles[style];
        assert_eq!(m["records"], 7, "{style}");
        let with_kinds = records
            .iter()
            .filter(|r| !r["gold"]["tom_kinds"].as_array().unwrap().is_empty())
            .count();
        assert_eq!(m["records_with_kinds"], with_kinds, "{style}");
        for field in [
            "primary_right",
            "primary_right_argmax",
            "affect_right",
            "intensity_right",
        ] {
            let x = m[field].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&x), "{style} {field} {x}");
        }
        right += m["primary_right"].as_f64().unwrap() * with_kinds as f64;
    }
    // The styles' right primaries are among the whole set's.
    let total = set["tom_kind"]["primary_right"].as_f64().unwrap()
        * set["tom_kind"]["records_with_kinds"].as_f64().unwrap();
    assert!(right <= total + 1e-9, "{right} > {total}");
    assert!(text.contains("by style"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("chat_excerpt") && l.contains(" 7 ")),
        "{text}"
    );
}

// `eval --sensitivity` measures the detector as it runs: recall per
// category and false positives on the controls at the policy's threshold,
// and how its confidence trades one against the other, which reads the
// same at that threshold.
#[test]
fn eval_sensitivity_reports_the_detector_and_its_trade_off() {
    model_present();
    let env = Env::new();
    let mut records = read_jsonl(&repo().join("data/sensitivity/part-a.jsonl"));
    records.truncate(40);
    let sensitive = records
        .iter()
        .filter(|r| r["sensitivity"]["sensitive"] == true)
        .count();
    assert!(sensitive > 5 && sensitive < 35, "{sensitive}");
    let lines: Vec<String> = records.iter().map(Value::to_string).collect();
    let data = env.write("sens.jsonl", lines.join("\n") + "\n");
    let (report, text) = eval_both(&env, &["--sensitivity", data.to_str().unwrap()]);
    let s = &report[0]["sensitivity"];
    assert_eq!(s["records"], 40);
    assert_eq!(s["sensitive"], sensitive);
    assert_eq!(s["controls"], 40 - sensitive);
    let support: u64 = s["per_category"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c["support"].as_u64().unwrap())
        .sum();
    assert_eq!(support, sensitive as u64);
    let t = &s["trade_off"];
    let auc = t["auc"].as_f64().unwrap();
    assert!((0.5..=1.0).contains(&auc), "{auc}");
    let rows = t["at_thresholds"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let at = rows
        .iter()
        .find(|r| r["threshold"] == s["threshold"])
        .unwrap();
    assert_eq!(at["recall"], s["recall"]);
    assert_eq!(
        at["control_false_positive_rate"],
        s["control_false_positive_rate"]
    );
    // Recall never rises with the threshold.
    let recalls: Vec<f64> = rows.iter().map(|r| r["recall"].as_f64().unwrap()).collect();
    assert!(recalls.windows(2).all(|w| w[0] >= w[1]), "{recalls:?}");
    assert!(text.contains("trade-off  AUC"), "{text}");
    assert!(text.contains("P >= 0.35"), "{text}");
}

/// A record of more than three passages is read by its passages alone
/// (`WHOLE_TEXT_MAX_PASSAGES`): a long journal with one sensitive line
/// among ordinary ones is detected by that line and quoted by it, and the
/// same journal without the line is not detected.
#[test]
fn a_long_journal_is_detected_and_quoted_by_its_one_sensitive_passage() {
    model_present();
    let env = Env::new();
    let day = |line: &str| {
        format!(
            "Long Saturday. Took Biscuit to the groomer first thing, he looks ridiculous and very proud. Then the big shop, and I finally found the oat milk the kids like.{line} Afternoon was the allotment, the beans are in and the shed door is fixed. Early night, choir tomorrow."
        )
    };
    let line = "The oncologist rang at lunch: the scan shows the tumour has grown and chemo starts on the 4th.";
    let (long, plain) = (day(&format!(" {line}")), day(""));
    env.jsonl(
        "records.jsonl",
        &[record("l1", &long), record("l2", &plain)],
    );
    env.cmd(
        "annotate",
        &["--input", "records.jsonl", "--out", "a.jsonl"],
    )
    .ok();
    let anns = read_jsonl(&env.path("a.jsonl"));
    let s = &anns[0]["sensitive"];
    assert_eq!(s["category"], "health", "{}", anns[0]);
    assert_eq!(s["detector"], "model");
    assert_eq!(s["quote"], line);
    assert_eq!(at_offsets(&long, s), line);
    assert!(s["confidence"].as_f64().unwrap() >= 0.35, "{s}");
    assert!(anns[1]["sensitive"].is_null(), "{}", anns[1]);
}

// A journal whose surest line is a self-harm line, among lines the head
// reads as `sexual` on the whole: the detection is filed under the line
// that fired (a safety record, listed first in the report), not under
// the record's most likely category.
#[test]
fn a_self_harm_line_among_other_lines_is_filed_as_a_safety_record() {
    model_present();
    let env = Env::new();
    let texts = [
        (
            "Watched the new series with Tom last night, the one with all the steamy scenes, and honestly we were both a bit embarrassed on the sofa. The lead actor is ridiculous though. ",
            "Gave my sister the good watch and the camera today, she should have them, I won't need them much longer.",
            " Then pizza and an early night.",
        ),
        (
            "Date night went fine, we kissed in the car park like teenagers and he asked to stay over, which I said no to, too soon. Work tomorrow is the audit. ",
            "Some nights I lie awake and think everyone would cope fine if I just wasn't here.",
            " Need to buy milk and bin bags.",
        ),
    ];
    let rows: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, (a, line, b))| record(&format!("j{i}"), &format!("{a}{line}{b}")))
        .collect();
    env.jsonl("records.jsonl", &rows);
    env.cmd(
        "annotate",
        &["--input", "records.jsonl", "--out", "a.jsonl"],
    )
    .ok();
    let anns = read_jsonl(&env.path("a.jsonl"));
    for ((a, line, b), ann) in texts.iter().zip(&anns) {
        let text = format!("{a}{line}{b}");
        let s = &ann["sensitive"];
        assert_eq!(s["category"], "mental_health_self_harm", "{ann}");
        assert_eq!(s["detector"], "model", "{ann}");
        assert_eq!(s["quote"], *line, "{ann}");
        assert_eq!(at_offsets(&text, s), *line);
        assert!(s["confidence"].as_f64().unwrap() >= 0.35, "{s}");
    }
}

/// The annotator id covers the encoder's `config.json` and `tokenizer.json`
/// and the heads' card, not only the weights: an edited `layer_norm_eps`
/// changes every output, so it must change the id, and the state never
/// mixes models.
#[test]
fn annotator_id_changes_when_the_encoder_config_or_the_heads_card_changes() {
    model_present();
    let env = Env::new();
    env.jsonl(
        "records.jsonl",
        &[record("c1", "Please keep answers short.")],
    );
    let base = repo().join("models/artifacts/all-MiniLM-L6-v2");
    let model = env.path("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(base.join(f), model.join(f)).unwrap();
    }
    let heads = env.path("heads");
    std::fs::create_dir_all(&heads).unwrap();
    let default_heads = repo().join("models/artifacts/adapters");
    for entry in std::fs::read_dir(&default_heads).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), heads.join(entry.file_name())).unwrap();
        }
    }
    let id = |out: &str| {
        env.cmd(
            "annotate",
            &[
                "--model-dir",
                model.to_str().unwrap(),
                "--heads-dir",
                heads.to_str().unwrap(),
                "--input",
                "records.jsonl",
                "--out",
                out,
            ],
        )
        .ok();
        read_jsonl(&env.path(out))[0]["annotator"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = id("a.jsonl");
    assert_eq!(first, id("b.jsonl"), "the same files give the same id");
    let config = std::fs::read_to_string(model.join("config.json")).unwrap();
    let edited = config.replace("\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 1e-05");
    assert_ne!(
        config, edited,
        "the fixture's config has layer_norm_eps 1e-12"
    );
    std::fs::write(model.join("config.json"), edited).unwrap();
    let after_config = id("c.jsonl");
    assert_ne!(first, after_config, "config.json is part of the id");
    let mut card: Value =
        serde_json::from_str(&std::fs::read_to_string(heads.join("card.json")).unwrap()).unwrap();
    card["edited_by_test"] = Value::Bool(true);
    std::fs::write(heads.join("card.json"), card.to_string()).unwrap();
    assert_ne!(after_config, id("d.jsonl"), "card.json is part of the id");
}

/// `train --curated` learns the affect and the intensity from the
/// curator's decisions: every accepted or relabelled tag gives its record
/// (and its quote) as an affect and an intensity example, with the
/// curator's affect and intensity where set, the annotated ones otherwise;
/// a rejected tag gives none. The card counts each head's curated examples
/// and the progress lines say so.
#[test]
fn train_curated_learns_affect_and_intensity_from_the_decisions() {
    use serde_json::json;
    model_present();
    let env = Env::new();
    let annotations = repo().join("data/sample/annotations.jsonl");
    env.run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
    let run = env.receipt()["run_id"].as_str().unwrap().to_string();
    let quarantine = env.table("quarantine");
    // Tags of four distinct records.
    let mut tags: Vec<&serde_json::Map<String, Value>> = Vec::new();
    for r in quarantine.iter().filter(|r| r["item_type"] == "tag") {
        if tags.iter().all(|t| t["record_id"] != r["record_id"]) {
            tags.push(r);
        }
    }
    assert!(tags.len() >= 4, "{}", tags.len());
    let line = |i: usize, decision: &str| {
        json!({"run_id": run, "item_id": tags[i]["item_id"], "decision": decision,
               "curator": "rosa", "decided_at": "2026-11-30T08:00:00Z"})
    };
    let other_affect = |i: usize| {
        if tags[i]["affect"] == "sad" {
            "happy"
        } else {
            "sad"
        }
    };
    let mut lines = vec![
        line(0, "accept"),
        line(1, "accept"),
        line(2, "relabel"),
        line(3, "reject"),
    ];
    lines[0]["affect"] = json!(other_affect(0));
    lines[0]["intensity"] = json!("extreme");
    lines[1]["intensity"] = json!("low");
    lines[2]["label"] = json!("goal");
    env.jsonl("decisions.jsonl", &lines);
    let applied = env.cmd(
        "curate",
        &["apply", "decisions.jsonl", "--staging", "staging"],
    );
    assert_eq!(applied.code, 0, "{}{}", applied.stdout, applied.stderr);
    let curated = read_table(&env.staging().join("curated/curated.parquet"));
    assert_eq!(curated.len(), 4);

    // Each accepted or relabelled tag: its record, and its quote where it
    // is not the whole record.
    let examples: usize = tags[..3]
        .iter()
        .map(|t| {
            let row = &by(&curated, "item_id", t["item_id"].as_str().unwrap())[0];
            let text = row["record_text"].as_str().unwrap().trim();
            match row["source_quote"].as_str().map(str::trim) {
                Some(q) if !q.is_empty() && q != text => 2,
                _ => 1,
            }
        })
        .sum();
    let out = env.train_small(&["--curated", "staging"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("curated: {examples} affect examples")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("curated: {examples} intensity examples")),
        "{stderr}"
    );
    let card: Value =
        serde_json::from_slice(&std::fs::read(env.path("heads/card.json")).unwrap()).unwrap();
    let per_head = &card["training_data"]["curated_examples_per_head"];
    assert_eq!(per_head["affect"], examples, "{per_head}");
    assert_eq!(per_head["intensity"], examples, "{per_head}");
    // Each curated example counts as --curated-weight rows (default 10).
    assert_eq!(card["training_data"]["curated_weight"], 10);
    assert!(
        stderr.contains(&format!(
            "curated: {examples} affect examples, each 10 training rows"
        )),
        "{stderr}"
    );
    // tom_kind also learns from the rejection.
    assert!(
        per_head["tom_kind"].as_u64().unwrap() > examples as u64,
        "{per_head}"
    );
    assert_eq!(
        per_head["tom_kind"],
        card["training_data"]["curated_examples"]
    );
}
