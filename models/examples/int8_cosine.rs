//! Worst cosine of the int8 encoder to the f32 one over a file of texts
//! (one per line), on every int8 kernel path this CPU has.
//!
//! `cargo run -p tomlite-models --release --example int8_cosine -- texts.txt`

use std::path::Path;

use tomlite_models::simd::{Kernels, PATHS};
use tomlite_models::{DEFAULT_MODEL_DIR, EncodeOptions, Encoder, Precision};

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    dot / (na.sqrt() * nb.sqrt())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = std::env::args()
        .nth(1)
        .ok_or("usage: int8_cosine TEXTS_FILE")?;
    let text = std::fs::read_to_string(&file)?;
    let texts: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DEFAULT_MODEL_DIR);
    let load = |precision, kernels| {
        Encoder::load_with_options(
            &dir,
            EncodeOptions {
                precision,
                kernels,
                ..EncodeOptions::default()
            },
        )
    };
    let exact = load(Precision::F32, None)?.encode(&texts)?.embeddings;
    let mut first: Option<Vec<Vec<f32>>> = None;
    for path in PATHS {
        let Ok(kernels) = Kernels::force(path) else {
            println!(
                "{path}: skipped (CPU lacks {})",
                path.missing_feature().unwrap_or("?")
            );
            continue;
        };
        let quant = load(Precision::Int8, Some(kernels))?
            .encode(&texts)?
            .embeddings;
        let worst = quant
            .iter()
            .zip(&exact)
            .map(|(q, e)| cosine(q, e))
            .fold(f64::INFINITY, f64::min);
        let same = first.as_ref().is_none_or(|f| *f == quant);
        println!(
            "{path}: worst cosine int8 to f32 over {} texts {worst:.6}; identical to the first path: {same}",
            texts.len()
        );
        first.get_or_insert(quant);
    }
    Ok(())
}
