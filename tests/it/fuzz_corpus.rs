//! Replays the fuzz corpus on the stable toolchain: every committed seed
//! (`fuzz/corpus/records/`) and every input a fuzz run ever crashed on
//! (`fuzz/regressions/records/`) goes through the record parser with the
//! same invariant checks as the `cargo fuzz` target, so CI exercises them
//! without cargo-fuzz.

#[path = "../../fuzz/src/invariants.rs"]
mod invariants;

use std::path::Path;

use tomlite::ingest::record::Item;

/// The files of a corpus folder, sorted.
fn files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != ".gitkeep"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_committed_fuzz_input_keeps_the_parser_invariants() {
    let seeds = files("fuzz/corpus/records");
    assert!(seeds.len() >= 10, "the seed corpus is there: {seeds:?}");
    for path in seeds.iter().chain(&files("fuzz/regressions/records")) {
        let data = std::fs::read(path).unwrap();
        let outcome = std::panic::catch_unwind(|| invariants::check_jsonl(&data));
        assert!(outcome.is_ok(), "{} breaks an invariant", path.display());
    }
}

#[test]
fn the_invariant_checks_fail_on_a_parse_that_loses_or_moves_or_alters_a_line() {
    // The checks must be able to fail: take a true parse, break it in one
    // way at a time, and expect each broken version to be caught.
    let data = format!(
        "{}\n\nnot json\n{}",
        serde_json::json!({"id": "r-1", "persona_id": "ada", "kind": "journal", "source_path": "j/1.md",
                           "created_at": "2026-11-28T21:00:00Z", "text": "Fine. Still fine."}),
        "{\"id\": \"cut"
    );
    let data = data.as_bytes();
    let opts = tomlite::ingest::record::IngestOptions::default();
    let cap = tomlite::ingest::jsonl::line_cap(&opts);
    let fresh = || invariants::parse(data, &opts, cap);
    assert_eq!(fresh().len(), 3);
    invariants::check_items(data, &opts, cap, &fresh());

    type Breakage = (&'static str, fn(&mut Vec<Item>));
    let breakages: [Breakage; 5] = [
        ("a line lost", |items| {
            items.pop();
        }),
        ("a line twice", |items| {
            let Item::Reject(r) = &items[1] else { panic!() };
            let r = r.clone();
            items.push(Item::Reject(r));
        }),
        ("a reject moved", |items| {
            let Item::Reject(r) = &mut items[1] else {
                panic!()
            };
            r.line = 2;
        }),
        ("a record altered", |items| {
            let Item::Record(r) = &mut items[0] else {
                panic!()
            };
            r.text.push('!');
        }),
        ("an empty sniffed id", |items| {
            let Item::Reject(r) = &mut items[2] else {
                panic!()
            };
            r.record_id = Some(String::new());
        }),
    ];
    for (what, breaks) in breakages {
        let mut items = fresh();
        breaks(&mut items);
        let caught = std::panic::catch_unwind(|| invariants::check_items(data, &opts, cap, &items));
        assert!(caught.is_err(), "not caught: {what}");
    }
}
