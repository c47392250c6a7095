//! The policy file: seed defaults, key paths in errors, `tomlite policy`.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::*;

fn policy(env: &Env, args: &[&str]) -> Ran {
    env.cmd("policy", args)
}

#[test]
fn policy_prints_the_seed_defaults_and_a_stable_sha256() {
    let env = Env::new();
    let a = policy(&env, &[]).ok();
    assert!(
        a.stdout.contains("tom_kind_confidence_min: 0.8"),
        "{}",
        a.stdout
    );
    assert!(
        a.stdout.contains("edge_confidence_min: 0.85"),
        "{}",
        a.stdout
    );
    let sha = a
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("# sha256: "))
        .unwrap()
        .to_string();
    assert_eq!(sha.len(), 64);
    // The printed YAML is itself a valid policy with the same hash.
    env.write("p.yaml", &a.stdout);
    let b = policy(&env, &["--policy", "p.yaml"]).ok();
    assert!(b.stdout.contains(&sha), "{}", b.stdout);
    // ./tomlite.yaml is picked up when present.
    env.write(
        "tomlite.yaml",
        "tom_lite_promotion_policy:\n  promote_edges_when:\n    edge_confidence_min: 0.9\n",
    );
    let c = policy(&env, &[]).ok();
    assert!(c.stdout.contains("from tomlite.yaml"), "{}", c.stdout);
    assert!(!c.stdout.contains(&sha));
}

#[test]
fn a_bad_key_exits_2_with_its_path_and_runs_nothing() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", "Keep it short.")]);
    env.jsonl("annotations.jsonl", &[]);
    for (yaml, needle) in [
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    tom_kind_confidence: 0.8\n",
            "tom_lite_promotion_policy.promote_tags_when.tom_kind_confidence: unknown field `tom_kind_confidence`",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    affect_confidence_min: 1.5\n",
            "tom_lite_promotion_policy.promote_tags_when.affect_confidence_min: 1.5 is outside [0, 1]",
        ),
        (
            "tom_lite:\n  tom_kind: [goal, wish]\n",
            "tom_lite.tom_kind[1]: `wish` is not in the ToM-lite tom_kind vocabulary",
        ),
        (
            "tom_lite_promotion_policy:\n  quarantine_when: [source_quote_missing]\n",
            "tom_lite_promotion_policy.quarantine_when: must list `confidence_below_threshold`",
        ),
        ("nonsense: true\n", "unknown field `nonsense`"),
        ("tom_lite: [\n", "not valid YAML"),
    ] {
        env.write("p.yaml", yaml);
        let ran = env.run_std(&["--policy", "p.yaml"]);
        assert_eq!(ran.code, 2, "{yaml}: {}", ran.stderr);
        assert!(ran.stderr.contains(needle), "{yaml}\n{}", ran.stderr);
        assert!(!env.staging().exists(), "nothing may run on a bad policy");
        let p = policy(&env, &["--policy", "p.yaml"]);
        assert_eq!(p.code, 2);
    }
}

/// Records and annotations that the seed quarantines in three ways: a tag
/// with no quote, an edge to a node nobody registered, five edges on one record.
fn seed_breakers(env: &Env) {
    const T: &str = "Sam said: keep answers short. Priya agreed, and so did Ola.";
    const Q: &str = "keep answers short.";
    env.write(
        "nodes.jsonl",
        "{\"id\":\"user:sam\",\"kind\":\"user\",\"name\":\"Sam\"}\n\
         {\"id\":\"user:priya\",\"kind\":\"user\",\"name\":\"Priya\"}\n",
    );
    env.jsonl(
        "records.jsonl",
        &[
            record("r1", T),
            record("r2", T),
            record("r3", T),
            record("r4", T),
        ],
    );
    let mut no_quote = tag("preference", 0.95, T, Q);
    for k in ["source_quote", "quote_start", "quote_end"] {
        no_quote.as_object_mut().unwrap().remove(k);
    }
    let five: Vec<Value> = (0..5)
        .map(|_| edge("r3", "preference", "user:sam", 0.95, T, Q))
        .collect();
    env.jsonl(
        "annotations.jsonl",
        &[
            annotation(
                "r1",
                vec![no_quote],
                vec![],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r2",
                vec![tag("preference", 0.95, T, Q)],
                vec![edge("r2", "relationship", "user:nobody-at-all", 0.95, T, Q)],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r3",
                vec![tag("preference", 0.95, T, Q)],
                five,
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
            annotation(
                "r4",
                vec![tag("preference", 0.95, T, Q)],
                vec![
                    edge("r4", "preference", "user:sam", 0.95, T, Q),
                    edge("r4", "relationship", "user:priya", 0.95, T, Q),
                ],
                ("neutral", 0.9),
                ("medium", 0.9),
            ),
        ],
    );
}

// A policy could switch off a seed rule: a tag without a quote crashed the
// run (exit 101), an edge to an unregistered node and all five edges of one
// record were promoted. Such keys are refused at load, naming the key.
#[test]
fn policies_that_would_undo_a_seed_rule_are_refused_naming_the_key() {
    let env = Env::new();
    seed_breakers(&env);
    for (yaml, key) in [
        (
            "tom_lite:\n  require_source_anchor: false\ntom_lite_promotion_policy:\n  promote_tags_when:\n    source_quote_required: false\n",
            "tom_lite.require_source_anchor: must be true",
        ),
        (
            "persona_memory_policy:\n  tom_lite:\n    require_source_anchor: false\n",
            "persona_memory_policy.tom_lite.require_source_anchor: must be true",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    source_quote_required: false\n",
            "tom_lite_promotion_policy.promote_tags_when.source_quote_required: must be true",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    source_quote_required: false\n",
            "tom_lite_promotion_policy.promote_edges_when.source_quote_required: must be true",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    both_nodes_must_exist: false\n",
            "tom_lite_promotion_policy.promote_edges_when.both_nodes_must_exist: must be true",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    max_edges_per_record: 1000000\n",
            "tom_lite_promotion_policy.promote_edges_when.max_edges_per_record: 1000000 is outside [1, 2]",
        ),
        (
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    max_edges_per_record: 0\n",
            "tom_lite_promotion_policy.promote_edges_when.max_edges_per_record: 0 is outside [1, 2]",
        ),
        (
            "tom_lite:\n  max_tom_kinds_per_memory: 3\n",
            "tom_lite.max_tom_kinds_per_memory: 3 is outside [1, 2]",
        ),
    ] {
        env.write("p.yaml", yaml);
        let ran = env.run_std(&["--policy", "p.yaml"]);
        assert_eq!(ran.code, 2, "{yaml}\n{}", ran.stderr);
        assert!(ran.stderr.contains(key), "{yaml}\n{}", ran.stderr);
        assert!(!env.staging().exists(), "nothing may run: {yaml}");
        let p = policy(&env, &["--policy", "p.yaml"]);
        assert_eq!(p.code, 2, "{yaml}");
        assert!(p.stderr.contains(key), "{}", p.stderr);
    }
    // Tightening is allowed and does what it says: one edge per record at most.
    env.write(
        "p.yaml",
        "tom_lite_promotion_policy:\n  promote_edges_when:\n    max_edges_per_record: 1\n",
    );
    env.run_std(&["--policy", "p.yaml"]).ok();
    assert!(env.table("promoted_edges").is_empty());
    let r4 = env.table("quarantine");
    let r4: Vec<_> = by(&r4, "record_id", "r4")
        .into_iter()
        .filter(|r| r["item_type"] == "edge")
        .collect();
    assert_eq!(r4.len(), 2);
    assert_eq!(reasons(r4[0]), ["more_than_two_edge_candidates"]);
    // Under the seed's rules only r4's two edges are promoted.
    std::fs::remove_dir_all(env.staging()).unwrap();
    env.run_std(&[]).ok();
    let promoted = env.table("promoted_edges");
    assert_eq!(promoted.len(), 2);
    assert!(promoted.iter().all(|e| e["record_id"] == "r4"));
    let q = env.table("quarantine");
    let r1 = by(&q, "record_id", "r1");
    assert_eq!(reasons(r1[0]), ["source_quote_missing"]);
    let r2: Vec<_> = by(&q, "record_id", "r2")
        .into_iter()
        .filter(|r| r["item_type"] == "edge")
        .collect();
    assert_eq!(reasons(r2[0]), ["unknown_target_node"]);
    let r3: Vec<_> = by(&q, "record_id", "r3")
        .into_iter()
        .filter(|r| r["item_type"] == "edge")
        .collect();
    assert_eq!(r3.len(), 5);
}

fn seed_blocks() -> PathBuf {
    repo().join("tests/fixtures/policy/seed-blocks.yaml")
}

fn sha_of(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("# sha256: "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string()
}

// The seed's own YAML (`persona_memory_policy:` with `tom_lite`,
// `graph_policy`, `intensity_policy`, `classifier_policy`) was refused as an
// unknown key; it loads as written and `tomlite policy` prints that layout.
#[test]
fn the_seeds_own_blocks_load_as_written_and_policy_prints_that_layout() {
    let env = Env::new();
    let fixture = seed_blocks();
    let seed = policy(&env, &["--policy", fixture.to_str().unwrap()]).ok();
    let defaults = policy(&env, &[]).ok();
    assert_eq!(sha_of(&seed.stdout), sha_of(&defaults.stdout));
    // The seed's layout: the persona block holds tom_lite, graph_policy,
    // intensity_policy and classifier_policy; the promotion policy is beside it.
    let out = &defaults.stdout;
    let at = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` not in\n{out}"))
    };
    let persona = at("\npersona_memory_policy:\n");
    let nested = [
        "\n  required_when_persona_attached: true\n",
        "\n  persona_id_field: active_domain_persona\n",
        "\n  allowed_collections:\n",
        "\n  tom_lite:\n    controlled_vocabulary: true\n",
        "\n  graph_policy:\n",
        "\n    max_hops_without_project_agent_approval: 3\n",
        "\n  intensity_policy:\n",
        "\n  classifier_policy:\n    optional: true\n",
    ];
    let promotion = at("\ntom_lite_promotion_policy:\n");
    for n in nested {
        let i = at(n);
        assert!(
            persona < i && i < promotion,
            "`{n}` outside the persona block\n{out}"
        );
    }
    assert!(!out.contains("\ntom_lite:\n"), "{out}");
    assert!(!out.contains("\nclassifier_policy:\n"), "{out}");
    // What it prints loads back to the same policy.
    env.write("printed.yaml", out);
    let back = policy(&env, &["--policy", "printed.yaml"]).ok();
    assert_eq!(sha_of(&back.stdout), sha_of(out));
    // And the example file is that same layout with the seed's values.
    let example = repo().join("tomlite.example.yaml");
    let ex = policy(&env, &["--policy", example.to_str().unwrap()]).ok();
    assert_eq!(sha_of(&ex.stdout), sha_of(out));
    assert!(
        std::fs::read_to_string(&example)
            .unwrap()
            .contains("\npersona_memory_policy:\n")
    );
    // A run takes the seed's blocks as its policy.
    env.jsonl("records.jsonl", &[record("r1", "Keep it short.")]);
    env.jsonl("annotations.jsonl", &[]);
    env.run_std(&["--policy", fixture.to_str().unwrap()]).ok();
    assert_eq!(env.receipt()["policy_sha256"], sha_of(out));
}

// Every key the seed's blocks carry is accepted only where it means something
// here: the memory service's keys take the seed's values only, and a block
// given twice (top level and under persona_memory_policy) is ambiguous.
#[test]
fn keys_tomlite_cannot_honour_are_refused_naming_the_key() {
    let env = Env::new();
    let seed = std::fs::read_to_string(seed_blocks()).unwrap();
    for (from, to, key) in [
        (
            "max_hops_default: 2",
            "max_hops_default: 5",
            "persona_memory_policy.graph_policy.max_hops_default: must be 2",
        ),
        (
            "max_hops_without_project_agent_approval: 3",
            "max_hops_without_project_agent_approval: 9",
            "persona_memory_policy.graph_policy.max_hops_without_project_agent_approval: must be 3",
        ),
        (
            "direct_graph_edge_creation_by_subagent: denied",
            "direct_graph_edge_creation_by_subagent: allowed",
            "persona_memory_policy.graph_policy.direct_graph_edge_creation_by_subagent: must be `denied`",
        ),
        (
            "direct_graph_access: denied",
            "direct_graph_access: allowed",
            "persona_memory_policy.graph_policy.direct_graph_access: must be `denied`",
        ),
        (
            "traversal_owner: memory_service",
            "traversal_owner: tomlite",
            "persona_memory_policy.graph_policy.traversal_owner: must be `memory_service`",
        ),
        (
            "graph_connections_remain: true",
            "graph_connections_remain: false",
            "persona_memory_policy.graph_policy.graph_connections_remain: must be true",
        ),
        (
            "require_source_paths: true",
            "require_source_paths: false",
            "persona_memory_policy.graph_policy.require_source_paths: must be true",
        ),
        (
            "      - truth_claims\n",
            "",
            "persona_memory_policy.intensity_policy.must_not_use_for: must list `truth_claims`",
        ),
        (
            "      - salience\n",
            "      - salience\n      - promotion\n",
            "persona_memory_policy.intensity_policy.use_for[3]: `promotion` is not",
        ),
        (
            "    - tom_edges\n",
            "    - tom_edges\n    - evidence_cases\n",
            "persona_memory_policy.allowed_collections[7]: `evidence_cases` is not",
        ),
        (
            "persona_id_field: active_domain_persona",
            "persona_id_field: persona",
            "persona_memory_policy.persona_id_field: must be `active_domain_persona`",
        ),
        (
            "required_when_persona_attached: true",
            "required_when_persona_attached: false",
            "persona_memory_policy.required_when_persona_attached: must be true",
        ),
        (
            "    output_is_advisory: true",
            "    output_is_advisory: false",
            "persona_memory_policy.classifier_policy.output_is_advisory: must be true",
        ),
        (
            "    max_tom_kinds_per_memory: 2",
            "    max_tom_kinds_per_memory: 2\n    max_tom_kind: 2",
            "persona_memory_policy.tom_lite.max_tom_kind: unknown field `max_tom_kind`",
        ),
        (
            "tom_lite_promotion_policy:",
            "tom_lite:\n  max_tom_kinds_per_memory: 1\ntom_lite_promotion_policy:",
            "tom_lite: given both at the top level and under persona_memory_policy",
        ),
    ] {
        assert!(seed.contains(from), "{from}");
        env.write("p.yaml", seed.replacen(from, to, 1));
        let p = policy(&env, &["--policy", "p.yaml"]);
        assert_eq!(p.code, 2, "{to}: {}", p.stdout);
        assert!(p.stderr.contains(key), "{to}\n{}", p.stderr);
    }
    // Lists of the memory service's keys may come in any order.
    env.write(
        "p.yaml",
        seed.replacen(
            "      - retrieval_reranking\n      - graph_traversal_weight\n",
            "      - graph_traversal_weight\n      - retrieval_reranking\n",
            1,
        ),
    );
    policy(&env, &["--policy", "p.yaml"]).ok();
}

// `local_llm_or_classifier_may_suggest: false` was accepted and ignored: the
// local classifier annotated anyway. Now such a run exits 2 saying so.
#[test]
fn a_classifier_that_may_not_suggest_does_not_annotate() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", "Keep it short.")]);
    env.jsonl("annotations.jsonl", &[]);
    for yaml in [
        "persona_memory_policy:\n  classifier_policy:\n    local_llm_or_classifier_may_suggest: false\n",
        "classifier_policy:\n  local_llm_or_classifier_may_suggest: false\n",
    ] {
        env.write("p.yaml", yaml);
        let ran = env.run(&[
            "--input",
            "records.jsonl",
            "--staging",
            "staging",
            "--policy",
            "p.yaml",
        ]);
        assert_eq!(ran.code, 2, "{yaml}\n{}", ran.stderr);
        assert!(
            ran.stderr
                .contains("local_llm_or_classifier_may_suggest is false")
                && ran.stderr.contains("the local classifier may not annotate")
                && ran.stderr.contains("--annotations"),
            "{}",
            ran.stderr
        );
        assert!(!env.staging().exists());
        let ann = env.cmd(
            "annotate",
            &[
                "--input",
                "records.jsonl",
                "--out",
                "a.jsonl",
                "--policy",
                "p.yaml",
            ],
        );
        assert_eq!(ann.code, 2, "{}", ann.stderr);
        assert!(
            ann.stderr.contains("the local classifier may not annotate"),
            "{}",
            ann.stderr
        );
        assert!(!env.path("a.jsonl").exists());
        // Annotations made elsewhere are still taken.
        env.run_std(&["--policy", "p.yaml"]).ok();
        std::fs::remove_dir_all(env.staging()).unwrap();
    }
    // `optional: false`: the local classifier is required, so annotations
    // made elsewhere are refused; both at once contradict each other.
    env.write(
        "p.yaml",
        "persona_memory_policy:\n  classifier_policy:\n    optional: false\n",
    );
    let ran = env.run_std(&["--policy", "p.yaml"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("classifier_policy.optional is false")
            && ran.stderr.contains("--annotations"),
        "{}",
        ran.stderr
    );
    assert!(!env.staging().exists());
    env.write(
        "p.yaml",
        "persona_memory_policy:\n  classifier_policy:\n    optional: false\n    local_llm_or_classifier_may_suggest: false\n",
    );
    let p = policy(&env, &["--policy", "p.yaml"]);
    assert_eq!(p.code, 2);
    assert!(
        p.stderr
            .contains("persona_memory_policy.classifier_policy.optional: cannot be false while local_llm_or_classifier_may_suggest is false"),
        "{}",
        p.stderr
    );
}

// The audit of item 16: every key a policy may change changes what a run
// does (the keys fixed to the seed's value are refused otherwise, above).
#[test]
fn every_key_a_policy_may_change_changes_the_outcome() {
    const T: &str = "Sam said: keep answers short. I felt ignored again.";
    const Q1: &str = "keep answers short.";
    const Q2: &str = "I felt ignored again.";
    let env = Env::new();
    env.write(
        "nodes.jsonl",
        "{\"id\":\"user:sam\",\"kind\":\"user\",\"name\":\"Sam\"}\n",
    );
    env.jsonl("records.jsonl", &[record("r1", T)]);
    env.jsonl(
        "annotations.jsonl",
        &[annotation(
            "r1",
            vec![tag("preference", 0.9, T, Q1), tag("emotion", 0.9, T, Q2)],
            vec![edge("r1", "preference", "user:sam", 0.9, T, Q1)],
            ("neutral", 0.9),
            ("medium", 0.9),
        )],
    );
    // What each policy does to r1's items: (tag reasons, edge reasons).
    let outcome = |yaml: &str| -> (Vec<Vec<String>>, Vec<Vec<String>>) {
        let _ = std::fs::remove_dir_all(env.staging());
        env.write("p.yaml", yaml);
        env.run_std(&["--policy", "p.yaml"]).ok();
        let q = env.table("quarantine");
        let of = |t: &str| -> Vec<Vec<String>> {
            q.iter()
                .filter(|r| r["item_type"] == t)
                .map(reasons)
                .collect()
        };
        (of("tag"), of("edge"))
    };
    let none: Vec<Vec<String>> = vec![];
    let both = |r: &str| vec![vec![r.to_string()], vec![r.to_string()]];
    let one = |r: &str| vec![vec![r.to_string()]];
    assert_eq!(
        outcome(""),
        (none.clone(), none.clone()),
        "the seed promotes all"
    );
    for (yaml, expected) in [
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    tom_kind_confidence_min: 0.95\n",
            (both("confidence_below_threshold"), none.clone()),
        ),
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    affect_confidence_min: 0.95\n",
            (both("confidence_below_threshold"), none.clone()),
        ),
        (
            "tom_lite_promotion_policy:\n  promote_tags_when:\n    intensity_confidence_min: 0.95\n",
            (both("confidence_below_threshold"), none.clone()),
        ),
        (
            "tom_lite_promotion_policy:\n  promote_edges_when:\n    edge_confidence_min: 0.95\n",
            (none.clone(), one("confidence_below_threshold")),
        ),
        (
            "persona_memory_policy:\n  tom_lite:\n    tom_kind: [emotion, goal]\n",
            (one("freeform_tom_label"), one("freeform_tom_label")),
        ),
        (
            "persona_memory_policy:\n  tom_lite:\n    affect: [sad, angry]\n",
            (both("freeform_tom_label"), none.clone()),
        ),
        (
            "persona_memory_policy:\n  tom_lite:\n    intensity: [high]\n",
            (both("freeform_tom_label"), none.clone()),
        ),
        (
            "persona_memory_policy:\n  tom_lite:\n    max_tom_kinds_per_memory: 1\n",
            (both("too_many_labels"), none.clone()),
        ),
    ] {
        assert_eq!(outcome(yaml), expected, "{yaml}");
    }
    // run.max_text_bytes: the record is rejected.
    let _ = std::fs::remove_dir_all(env.staging());
    env.write("p.yaml", "run:\n  max_text_bytes: 10\n");
    env.run_std(&["--policy", "p.yaml"]).ok();
    assert_eq!(env.receipt()["counts"]["rejected"], 1);
}

// The audit's last tunable key: `classifier_policy.abstain_below` moves what
// the local classifier tags and is part of its identity.
#[test]
fn abstain_below_changes_what_the_local_classifier_tags() {
    let env = Env::new();
    env.run_sample(&[]).ok();
    let before = env.receipt();
    std::fs::remove_dir_all(env.staging()).unwrap();
    env.write(
        "p.yaml",
        "persona_memory_policy:\n  classifier_policy:\n    abstain_below: 0.95\n",
    );
    env.run_sample(&["--policy", "p.yaml"]).ok();
    let after = env.receipt();
    let abstained = |r: &Value| r["counts"]["abstained"].as_u64().unwrap();
    assert!(
        abstained(&after) > abstained(&before),
        "{} then {}",
        abstained(&before),
        abstained(&after)
    );
    assert_ne!(after["annotator"]["id"], before["annotator"]["id"]);
}

/// `run.max_text_bytes` near `u64::MAX` once wrapped the JSONL line cap to
/// 65,535 bytes; it is range-checked like every other numeric key, naming
/// the key, with exit 2.
#[test]
fn max_text_bytes_near_u64_max_is_refused_instead_of_wrapping_the_line_cap() {
    let env = Env::new();
    env.jsonl("records.jsonl", &[record("r1", "Keep it short.")]);
    env.jsonl("annotations.jsonl", &[]);
    for value in ["18446744073709551615", "0", "67108865"] {
        env.write("p.yaml", format!("run:\n  max_text_bytes: {value}\n"));
        let ran = env.run_std(&["--policy", "p.yaml"]);
        assert_eq!(ran.code, 2, "{value}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("run.max_text_bytes") && ran.stderr.contains("outside 1..="),
            "{value}: {}",
            ran.stderr
        );
    }
    env.write("p.yaml", "run:\n  max_text_bytes: 67108864\n");
    assert_eq!(env.run_std(&["--policy", "p.yaml"]).code, 0);
}
