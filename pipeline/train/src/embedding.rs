//! Embedding texts for training: in chunks with a progress line, and
//! cached between runs under the encoder's and the texts' hash. A leaf:
//! it knows nothing of the training data ([`crate::embed_cache`]
//! embeds the data's sets with it).

use std::path::Path;

use tomlite_models::{Encoder, Rows};

use crate::error::LearnError;

/// Embeds texts with a progress line on stderr. With a cache directory,
/// the embeddings of the same texts under the same encoder are read back
/// instead of recomputed (`<cache>/<sha256>.safetensors`).
pub(super) fn embed(
    encoder: &Encoder,
    texts: &[&str],
    what: &str,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Rows, LearnError> {
    let file = cache.map(|c| c.join(format!("{}.safetensors", embedding_key(encoder, texts))));
    if let Some(f) = &file
        && let Ok(cached) = Rows::read_safetensors(f, "embeddings")
        && (cached.len(), cached.dim()) == (texts.len(), encoder.dim())
    {
        progress(&format!(
            "embedding {what}: {} texts read from the cache {}",
            texts.len(),
            f.display()
        ));
        return Ok(cached);
    }
    let embeddings = embed_in_chunks(encoder, texts, what, progress)?;
    if let (Some(f), Some(c)) = (&file, cache) {
        // The cache is an optimisation: failing to write it is not an error.
        if std::fs::create_dir_all(c).is_ok() {
            let _ = embeddings.write_safetensors(f, "embeddings");
        }
    }
    Ok(embeddings)
}

/// The cache key of `texts`' embeddings: sha256 of the encoder (and its
/// adapters) and of the texts.
pub(super) fn embedding_key(encoder: &Encoder, texts: &[&str]) -> String {
    use sha2::{Digest as _, Sha256};
    let mut h = Sha256::new();
    h.update(encoder.sha256().as_bytes());
    // A fine-tuned encoder embeds differently: its own cache entries.
    if let Some(a) = encoder.adapters_sha256() {
        h.update(b"lora");
        h.update(a.as_bytes());
    }
    for t in texts {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Encodes `texts` 512 at a time, with a progress line after each chunk.
pub(super) fn embed_in_chunks(
    encoder: &Encoder,
    texts: &[&str],
    what: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Rows, LearnError> {
    let mut rows: Vec<f32> = Vec::with_capacity(texts.len() * encoder.dim());
    let chunk = 512;
    let started = std::time::Instant::now();
    for (i, part) in texts.chunks(chunk).enumerate() {
        let e = encoder.encode(part)?;
        for v in e.embeddings {
            rows.extend(v);
        }
        let done = (i * chunk + part.len()).min(texts.len());
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        progress(&format!(
            "embedding {what}: {done}/{} texts ({rate:.0}/s, ETA {:.0}s)",
            texts.len(),
            (texts.len() - done) as f64 / rate.max(1e-9)
        ));
    }
    Ok(Rows::new(rows, encoder.dim())?)
}
