//! `tomlite contract lint` and `tomlite contract schema` through the real CLI:
//! the seed's own blocks, tomlite's own contract, and one failing fixture per rule.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use tomlite_contract::{REQUIRED_SECTIONS, Rule};

use crate::common::*;

fn fixtures() -> PathBuf {
    repo().join("tests/fixtures/contracts")
}

/// `tomlite contract lint --json FILES`: exit code and the report.
fn lint(files: &[PathBuf]) -> (i32, Value) {
    let out = bin()
        .args(["contract", "lint", "--json"])
        .args(files)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap(), v)
}

fn rules_of(report: &Value) -> BTreeSet<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn tomlites_own_contract_lints_clean() {
    let (code, v) = lint(&[repo().join("contracts/tomlite-annotator.yaml")]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["findings"], serde_json::json!([]));
}

#[test]
fn every_rule_has_a_fixture_that_fails_it_and_nothing_else() {
    let mut seen = BTreeSet::new();
    for rule in Rule::ALL {
        let file = fixtures().join(format!("{}.yaml", rule.id()));
        let (code, v) = lint(std::slice::from_ref(&file));
        let expected = if rule == Rule::UnknownKind { 0 } else { 1 };
        assert_eq!(code, expected, "{}: {v:#}", rule.id());
        assert_eq!(
            rules_of(&v),
            BTreeSet::from([rule.id().to_string()]),
            "{}",
            rule.id()
        );
        for f in v["findings"].as_array().unwrap() {
            assert_eq!(f["file"], file.display().to_string());
            assert!(!f["path"].as_str().unwrap().is_empty());
            assert!(!f["message"].as_str().unwrap().is_empty());
            assert_eq!(
                f["severity"],
                if expected == 0 { "warning" } else { "error" }
            );
        }
        seen.insert(rule.id());
    }
    // No fixture for a rule that does not exist.
    let files: BTreeSet<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .filter(|s| s != "seed")
        .collect();
    assert_eq!(files, seen.iter().map(|s| s.to_string()).collect());
}

#[test]
fn findings_name_the_yaml_path() {
    let (_, v) = lint(&[fixtures().join("dag_node_without_receipts.yaml")]);
    let f = &v["findings"][0];
    assert_eq!(f["path"], "dag_spec.nodes[0].receipts");
    assert_eq!(f["message"], "node `ingest` names no receipts");
    let (_, v) = lint(&[fixtures().join("status_reporting_weak.yaml")]);
    let paths: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "status_reporting.event_fields",
            "status_reporting.recipient"
        ]
    );
}

#[test]
fn the_seeds_blocks_assembled_fail_only_where_the_seed_leaves_placeholders() {
    // The seed's example helper has no receipts, its memory_policy lists no
    // collection, and its `kind` is the list of choices.
    let (code, v) = lint(&[fixtures().join("seed/assembled.yaml")]);
    assert_eq!(code, 1);
    let got: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().into(),
                f["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "helper_access_without_receipts".to_string(),
                "delegated_access_skills[0].required_receipts".to_string()
            ),
            ("unknown_kind".into(), "kind".into()),
            (
                "memory_recall_unscoped".into(),
                "memory_policy.allowed_collections".into()
            ),
        ]
    );
}

#[test]
fn each_seed_block_is_clean_in_its_own_section() {
    // Alone, a block is not a contract (sections are missing), but nothing
    // inside the block itself is wrong, except what the seed leaves open.
    let expect: &[(&str, &str, &[&str])] = &[
        ("01-dag-spec-minimum.yaml", "dag_spec", &[]),
        ("02-prompt-preflight.yaml", "prompt_preflight", &[]),
        ("03-loop-policy.yaml", "loop_policy", &[]),
        ("04-tool-policy.yaml", "tool_policy", &[]),
        (
            "05-memory-policy.yaml",
            "memory_policy",
            &["memory_recall_unscoped"],
        ),
        (
            "06-persona-memory-policy.yaml",
            "persona_memory_policy",
            &[],
        ),
        (
            "11-delegated-access-skills.yaml",
            "delegated_access_skills",
            &["helper_access_without_receipts"],
        ),
        ("12-retry-bounded-iterative.yaml", "retry_policy", &[]),
        ("13-retry-inner-loop.yaml", "retry_policy", &[]),
        ("14-status-reporting.yaml", "status_reporting", &[]),
        ("15-output-contract.yaml", "output_contract", &[]),
    ];
    for (file, section, rules) in expect {
        let (code, v) = lint(&[fixtures().join("seed").join(file)]);
        assert_eq!(code, 1, "{file}: sections are missing");
        let inside: BTreeSet<String> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["path"].as_str().unwrap().starts_with(section))
            .map(|f| f["rule"].as_str().unwrap().to_string())
            .collect();
        let want: BTreeSet<String> = rules.iter().map(|s| s.to_string()).collect();
        assert_eq!(inside, want, "{file}");
    }
    // The skeleton's `{}` placeholders are not a status-reporting contract.
    let (_, v) = lint(&[fixtures().join("seed/00-required-sections.yaml")]);
    let r = rules_of(&v);
    assert!(
        r.contains("status_reporting_weak") && r.contains("retry_default_missing"),
        "{r:?}"
    );
    assert!(
        !r.contains("missing_section"),
        "the skeleton declares every section: {r:?}"
    );
}

#[test]
fn text_output_and_exit_codes_over_several_files() {
    let out = bin()
        .args(["contract", "lint"])
        .arg(repo().join("contracts/tomlite-annotator.yaml"))
        .arg(fixtures().join("cannot_field.yaml"))
        .arg(fixtures().join("no-such-file.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "cannot_field.yaml: error[cannot_field] cannot: `cannot:` is not a contract field"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("no-such-file.yaml: error[yaml_unreadable] $: cannot read the file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tomlite contract lint: 3 files, 2 errors, 0 warnings"),
        "{stdout}"
    );
}

#[test]
fn schema_is_json_schema_with_the_required_sections() {
    let out = bin().args(["contract", "schema"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let req: Vec<&str> = s["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(req, REQUIRED_SECTIONS);
    assert_eq!(
        s["properties"]["status_reporting"]["properties"]["recipient"]["const"],
        "project_agent"
    );
    assert_eq!(
        s["properties"]["dag_spec"]["properties"]["start_gate"]["properties"]["require_dag_spec_before_work"]
            ["const"],
        true
    );
}
