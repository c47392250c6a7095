//! The bundled sample: every outcome and every reason in one run.

use crate::common::*;

#[test]
fn sample_run_promotes_quarantines_abstains_and_rejects_as_documented() {
    let env = Env::new();
    let annotations = repo().join("data/sample/annotations.jsonl");
    let ran = env
        .run_sample(&["--annotations", annotations.to_str().unwrap()])
        .ok();
    assert!(
        ran.stdout
            .contains("41 in: 40 processed, 0 skipped (unchanged), 1 rejected"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout
            .contains("22 promoted, 17 quarantined; 5 records abstained"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("14 promoted, 10 quarantined"),
        "{}",
        ran.stdout
    );

    let receipt = env.receipt();
    let c = &receipt["counts"];
    assert_eq!(
        c["records_in"].as_u64().unwrap(),
        c["rejected"].as_u64().unwrap()
            + c["skipped_unchanged"].as_u64().unwrap()
            + c["processed"].as_u64().unwrap()
    );
    for (reason, n) in [
        ("confidence_below_threshold", 8),
        ("source_quote_missing", 5),
        ("freeform_tom_label", 5),
        ("sensitive_boundary_or_safety_record", 4),
        ("too_many_labels", 3),
        ("more_than_two_edge_candidates", 3),
        ("unknown_target_node", 2),
        ("unparseable_annotation", 1),
    ] {
        assert_eq!(receipt["reasons"][reason], n, "{reason}");
    }

    // m-001 sits exactly on every tag threshold and is promoted.
    let tags = env.table("promoted_tags");
    assert_eq!(tags.len(), 22);
    let m1 = by(&tags, "record_id", "m-001");
    assert_eq!(m1.len(), 1);
    assert_eq!(m1[0]["tom_kind_confidence"], 0.80);
    assert_eq!(m1[0]["affect_confidence"], 0.70);
    assert_eq!(m1[0]["intensity_confidence"], 0.65);

    // j-007: two reasons on one item.
    let q = env.table("quarantine");
    let j7 = by(&q, "record_id", "j-007");
    assert_eq!(
        reasons(j7[0]),
        ["confidence_below_threshold", "source_quote_missing"]
    );
    // j-011: unreadable annotation kept raw for the curator.
    let j11 = by(&q, "record_id", "j-011");
    assert_eq!(j11[0]["item_type"], "annotation");
    assert!(j11[0]["raw_annotation"].as_str().unwrap().contains("j-011"));

    let rejects = env.table("rejects");
    let bad = by(&rejects, "record_id", "j-bad-kind");
    assert_eq!(bad[0]["field"], "kind");
    assert_eq!(bad[0]["line"], 23);
    let orphan = by(&rejects, "record_id", "j-999");
    assert_eq!(orphan[0]["input"], "annotations");

    let abstained = env.table("abstained");
    assert_eq!(abstained.len(), 5);
}
