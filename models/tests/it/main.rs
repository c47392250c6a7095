//! Integration tests of tomlite-models, built into one binary.
//!
//! `tiny`: a random-weight BERT and a handful-of-words tokenizer written in
//! the test, loaded through [`tomlite_models::Encoder::load`]; needs no
//! download. `reference`: the real all-MiniLM-L6-v2 against
//! sentence-transformers' embeddings in `models/tests/fixtures`; needs
//! `scripts/fetch-model` to have run and fails (never skips) otherwise.

mod finetune;
mod heads;
mod reference;
mod tiny;

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "vector lengths differ");
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    dot / (na.sqrt() * nb.sqrt())
}

/// L2 norm of a vector.
pub fn norm(a: &[f32]) -> f64 {
    a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt()
}
