//! Committed memories' embeddings, for memory-to-memory links.
//!
//! Each committed record's text embedding is kept in the state as int8
//! (384 bytes a record): the vector is scaled so its largest component is
//! ±127 and rounded. Cosine similarity does not depend on the scale, so no
//! scale is stored; rounding moves a cosine by well under 0.01.

use foldhash::HashMap;

use tomlite_staging::State;

/// Quantises a vector to int8, its largest component to ±127.
pub fn quantize(v: &[f32]) -> Vec<i8> {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return vec![0; v.len()];
    }
    let s = 127.0 / max;
    v.iter()
        .map(|&x| (x * s).round().clamp(-127.0, 127.0) as i8)
        .collect()
}

fn norm_i8(v: &[i8]) -> f32 {
    v.iter()
        .map(|&x| f32::from(x) * f32::from(x))
        .sum::<f32>()
        .sqrt()
}

/// Cosine of a float query and a stored int8 vector of norm `norm`.
pub fn cosine(query: &[f32], stored: &[i8], norm: f32) -> f32 {
    if stored.len() != query.len() || norm == 0.0 {
        return 0.0;
    }
    let dot: f32 = query
        .iter()
        .zip(stored)
        .map(|(&q, &s)| q * f32::from(s))
        .sum();
    let qn = query.iter().map(|x| x * x).sum::<f32>().sqrt();
    if qn == 0.0 { 0.0 } else { dot / (qn * norm) }
}

struct Memory {
    id: String,
    vector: Vec<i8>,
    norm: f32,
}

/// Committed memories by persona.
#[derive(Default)]
pub struct MemoryIndex {
    by_persona: HashMap<String, Vec<Memory>>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex")
            .field("memories", &self.len())
            .finish()
    }
}

impl MemoryIndex {
    /// Every embedding in a committed state.
    pub fn from_state(state: &State) -> Self {
        let mut index = Self::default();
        for (id, persona, v) in state.vectors() {
            index.add(id, persona, v.to_vec());
        }
        index.sort();
        index
    }

    /// Adds one memory.
    pub fn add(&mut self, id: &str, persona: &str, vector: Vec<i8>) {
        let norm = norm_i8(&vector);
        self.by_persona
            .entry(persona.to_string())
            .or_default()
            .push(Memory {
                id: id.to_string(),
                vector,
                norm,
            });
    }

    /// Orders each persona's memories by id, so ties resolve the same way
    /// whatever order they were added in.
    pub fn sort(&mut self) {
        for v in self.by_persona.values_mut() {
            v.sort_by(|a, b| a.id.cmp(&b.id));
        }
    }

    /// Number of memories.
    pub fn len(&self) -> usize {
        self.by_persona.values().map(Vec::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most similar memory of `persona` other than the ids `skip`
    /// refuses, and its cosine.
    pub fn nearest(
        &self,
        persona: &str,
        query: &[f32],
        skip: impl Fn(&str) -> bool,
    ) -> Option<(&str, f32)> {
        let mut best: Option<(&str, f32)> = None;
        for m in self.by_persona.get(persona)? {
            if skip(&m.id) {
                continue;
            }
            let c = cosine(query, &m.vector, m.norm);
            if best.is_none_or(|(_, b)| c > b) {
                best = Some((&m.id, c));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_cosine_stays_within_a_hundredth_of_the_float_one() {
        let mut rng = tomlite_models::heads::Rng::new(7);
        for _ in 0..200 {
            let a: Vec<f32> = (0..384).map(|_| rng.uniform(1.0)).collect();
            let b: Vec<f32> = a.iter().map(|x| x + rng.uniform(0.8)).collect();
            let exact = {
                let d: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
                let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
                d / (n(&a) * n(&b))
            };
            let q = quantize(&b);
            let approx = cosine(&a, &q, norm_i8(&q));
            assert!((exact - approx).abs() < 0.01, "{exact} vs {approx}");
        }
    }

    #[test]
    fn nearest_stays_within_the_persona_and_skips_what_it_is_told() {
        let mut idx = MemoryIndex::default();
        idx.add("m1", "ada", quantize(&[1.0, 0.0]));
        idx.add("m2", "ada", quantize(&[0.6, 0.8]));
        idx.add("m3", "milo", quantize(&[1.0, 0.0]));
        let (id, c) = idx.nearest("ada", &[1.0, 0.1], |_| false).unwrap();
        assert_eq!(id, "m1");
        assert!(c > 0.99);
        assert_eq!(
            idx.nearest("ada", &[1.0, 0.1], |id| id == "m1").unwrap().0,
            "m2"
        );
        assert!(idx.nearest("kai", &[1.0, 0.0], |_| false).is_none());
    }
}
