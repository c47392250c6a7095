//! The policy file: seed defaults, key paths in errors, `tomlite policy`.

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
