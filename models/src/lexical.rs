//! A lexical classifier: logistic regression over hashed word unigrams and
//! bigrams (sublinear tf · idf, unit length). It reads what a mean-pooled
//! sentence vector blurs: "technical debt" is not "debt collector", "my
//! cat's surgery" is not "my surgery". The sensitive-content detector
//! averages it with the head on the encoder's vectors.
//!
//! Features are a pure function of the text (Unicode lower case, words of
//! letters, digits and inner apostrophes, FNV-1a hashed into
//! [`BUCKETS`]), so training and inference see the same ones; only the
//! buckets seen in training carry an idf and a weight.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::Error;

/// Hash buckets of the features (2^20: collisions are rare at the few
/// tens of thousands of n-grams a training set has).
pub const BUCKETS: u32 = 1 << 20;

/// How a lexical model is fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct LexicalOptions {
    /// Inverse L2 strength, as in the usual `C` of logistic regression
    /// (penalty ½‖w‖² / C against the summed weighted log-loss).
    pub c: f64,
    /// Full-batch Adam steps.
    pub steps: usize,
    /// Adam's step size.
    pub learning_rate: f64,
}

impl Default for LexicalOptions {
    fn default() -> Self {
        Self {
            c: 16.0,
            steps: 400,
            learning_rate: 0.05,
        }
    }
}

/// A fitted binary lexical model: P(positive | text).
#[derive(Debug, Clone, PartialEq)]
pub struct Lexical {
    /// Bucket → (idf, weight), for the buckets seen in training.
    terms: BTreeMap<u32, (f32, f32)>,
    /// The intercept.
    bias: f32,
}

fn fnv1a(parts: &[&str]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h ^= u32::from(b' ');
            h = h.wrapping_mul(0x0100_0193);
        }
        for b in p.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// The words of `text`, lower-cased: runs of letters and digits, with an
/// apostrophe (' or ’) kept inside a word ("don't", "cat's").
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let inner_apostrophe = (c == '\'' || c == '’')
            && !cur.is_empty()
            && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        } else if inner_apostrophe {
            cur.push('\'');
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The hashed unigrams and bigrams of `text` with their sublinear term
/// frequency (1 + ln tf), sorted by bucket.
pub fn term_frequencies(text: &str) -> Vec<(u32, f32)> {
    let w = words(text);
    let mut tf: BTreeMap<u32, u32> = BTreeMap::new();
    for (i, a) in w.iter().enumerate() {
        *tf.entry(fnv1a(&[a]) % BUCKETS).or_default() += 1;
        if let Some(b) = w.get(i + 1) {
            *tf.entry(fnv1a(&[a, b]) % BUCKETS).or_default() += 1;
        }
    }
    tf.into_iter()
        .map(|(k, n)| (k, 1.0 + (n as f32).ln()))
        .collect()
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl Lexical {
    /// Fits the model on `texts` and their labels, each class weighted so
    /// that both weigh the same in the loss; deterministic.
    ///
    /// # Errors
    /// When there are no texts, the lengths differ, or one class is absent.
    pub fn train(texts: &[&str], labels: &[bool], opts: &LexicalOptions) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidOptions { reason };
        if texts.len() != labels.len() {
            return Err(invalid(format!(
                "{} texts but {} labels",
                texts.len(),
                labels.len()
            )));
        }
        let pos = labels.iter().filter(|&&l| l).count();
        let n = labels.len();
        if pos == 0 || pos == n {
            return Err(invalid(
                "a lexical model needs positive and negative examples".into(),
            ));
        }
        let tfs: Vec<Vec<(u32, f32)>> = texts.iter().map(|t| term_frequencies(t)).collect();
        let mut df: BTreeMap<u32, u32> = BTreeMap::new();
        for row in &tfs {
            for &(k, _) in row {
                *df.entry(k).or_default() += 1;
            }
        }
        // Dense indices of the seen buckets, in bucket order.
        let index: HashMap<u32, usize> = df.keys().enumerate().map(|(i, &k)| (k, i)).collect();
        let idf: Vec<f32> = df
            .values()
            .map(|&d| (((1 + n) as f32) / ((1 + d) as f32)).ln() + 1.0)
            .collect();
        let rows: Vec<Vec<(usize, f32)>> = tfs
            .iter()
            .map(|row| {
                let v: Vec<(usize, f32)> = row
                    .iter()
                    .map(|&(k, tf)| {
                        let i = index[&k];
                        (i, tf * idf[i])
                    })
                    .collect();
                let norm = v.iter().map(|(_, x)| x * x).sum::<f32>().sqrt().max(1e-12);
                v.into_iter().map(|(i, x)| (i, x / norm)).collect()
            })
            .collect();
        let weight_pos = n as f64 / (2.0 * pos as f64);
        let weight_neg = n as f64 / (2.0 * (n - pos) as f64);
        let dims = idf.len();
        let (mut w, mut b) = (vec![0f64; dims], 0f64);
        let (mut m, mut v) = (vec![0f64; dims + 1], vec![0f64; dims + 1]);
        let (beta1, beta2, eps) = (0.9f64, 0.999f64, 1e-8f64);
        // The objective, divided by n: ½‖w‖²/(C·n) + mean weighted loss.
        let lambda = 1.0 / (opts.c * n as f64);
        let mut grad = vec![0f64; dims + 1];
        for step in 1..=opts.steps {
            grad.iter_mut().for_each(|g| *g = 0.0);
            for (row, &label) in rows.iter().zip(labels) {
                let z = b + row.iter().map(|&(i, x)| w[i] * f64::from(x)).sum::<f64>();
                let (y, cw) = if label {
                    (1.0, weight_pos)
                } else {
                    (0.0, weight_neg)
                };
                let r = cw * (sigmoid(z) - y) / n as f64;
                for &(i, x) in row {
                    grad[i] += r * f64::from(x);
                }
                grad[dims] += r;
            }
            for (g, wi) in grad.iter_mut().zip(&w) {
                *g += lambda * wi;
            }
            let (c1, c2) = (1.0 - beta1.powi(step as i32), 1.0 - beta2.powi(step as i32));
            for j in 0..=dims {
                m[j] = beta1 * m[j] + (1.0 - beta1) * grad[j];
                v[j] = beta2 * v[j] + (1.0 - beta2) * grad[j] * grad[j];
                let delta = opts.learning_rate * (m[j] / c1) / ((v[j] / c2).sqrt() + eps);
                if j == dims {
                    b -= delta;
                } else {
                    w[j] -= delta;
                }
            }
        }
        Ok(Self {
            terms: df
                .keys()
                .zip(idf.iter().zip(&w))
                .map(|(&k, (&idf, &w))| (k, (idf, w as f32)))
                .collect(),
            bias: b as f32,
        })
    }

    /// P(positive | `text`).
    pub fn probability(&self, text: &str) -> f64 {
        let v: Vec<(f32, f32)> = term_frequencies(text)
            .into_iter()
            .filter_map(|(k, tf)| self.terms.get(&k).map(|&(idf, w)| (tf * idf, w)))
            .collect();
        let norm = v.iter().map(|(x, _)| x * x).sum::<f32>().sqrt();
        let dot = if norm > 0.0 {
            v.iter().map(|(x, w)| f64::from(x * w)).sum::<f64>() / f64::from(norm)
        } else {
            0.0
        };
        sigmoid(f64::from(self.bias) + dot)
    }

    /// How many buckets carry a weight.
    pub fn terms(&self) -> usize {
        self.terms.len()
    }

    /// The model as tensors named `<prefix>.buckets` (u32),
    /// `<prefix>.idf`, `<prefix>.weight` and `<prefix>.bias` (f32).
    pub(crate) fn tensors(
        &self,
        prefix: &str,
        out: &mut HashMap<String, Tensor>,
    ) -> Result<(), Error> {
        let n = self.terms.len();
        let buckets: Vec<u32> = self.terms.keys().copied().collect();
        let idf: Vec<f32> = self.terms.values().map(|t| t.0).collect();
        let weight: Vec<f32> = self.terms.values().map(|t| t.1).collect();
        let dev = Device::Cpu;
        out.insert(
            format!("{prefix}.buckets"),
            Tensor::from_vec(buckets, n, &dev)?,
        );
        out.insert(format!("{prefix}.idf"), Tensor::from_vec(idf, n, &dev)?);
        out.insert(
            format!("{prefix}.weight"),
            Tensor::from_vec(weight, n, &dev)?,
        );
        out.insert(
            format!("{prefix}.bias"),
            Tensor::from_vec(vec![self.bias], 1, &dev)?,
        );
        Ok(())
    }

    /// Reads what [`Lexical::tensors`] wrote; `None` when `ts` has no
    /// `<prefix>.weight`.
    pub(crate) fn from_tensors(
        prefix: &str,
        ts: &HashMap<String, Tensor>,
        file: &Path,
    ) -> Result<Option<Self>, Error> {
        if !ts.contains_key(&format!("{prefix}.weight")) {
            return Ok(None);
        }
        let bad = |message: String| Error::Heads {
            path: file.to_path_buf(),
            message,
        };
        let get = |k: &str| {
            ts.get(&format!("{prefix}.{k}"))
                .ok_or_else(|| bad(format!("tensor {prefix}.{k} is missing")))
        };
        let buckets: Vec<u32> = get("buckets")?.to_dtype(DType::U32)?.to_vec1()?;
        let idf: Vec<f32> = get("idf")?.to_dtype(DType::F32)?.to_vec1()?;
        let weight: Vec<f32> = get("weight")?.to_dtype(DType::F32)?.to_vec1()?;
        let bias: Vec<f32> = get("bias")?.to_dtype(DType::F32)?.to_vec1()?;
        if buckets.len() != idf.len() || buckets.len() != weight.len() || bias.len() != 1 {
            return Err(bad(format!("tensors {prefix}.* have mismatched lengths")));
        }
        if buckets.iter().any(|&k| k >= BUCKETS) {
            return Err(bad(format!("{prefix}.buckets has a bucket ≥ {BUCKETS}")));
        }
        Ok(Some(Self {
            terms: buckets
                .into_iter()
                .zip(idf.into_iter().zip(weight))
                .collect(),
            bias: bias[0],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_lower_case_and_keep_inner_apostrophes() {
        assert_eq!(
            words("Don't tell MUM — it's my cat’s surgery, 'ok'?"),
            [
                "don't", "tell", "mum", "it's", "my", "cat's", "surgery", "ok"
            ]
        );
    }

    #[test]
    fn a_fitted_model_separates_its_classes_and_round_trips() {
        let pos = [
            "the debt collector called again",
            "I owe the bank more than I earn",
            "payday loan is due friday and I can't cover it",
        ];
        let neg = [
            "technical debt in the billing service",
            "booked the tennis court for friday",
            "the bank holiday weekend was lovely",
        ];
        let texts: Vec<&str> = pos.iter().chain(&neg).copied().collect();
        let labels: Vec<bool> = (0..6).map(|i| i < 3).collect();
        let m = Lexical::train(&texts, &labels, &LexicalOptions::default()).unwrap();
        for t in pos {
            assert!(m.probability(t) > 0.5, "{t}: {}", m.probability(t));
        }
        for t in neg {
            assert!(m.probability(t) < 0.5, "{t}: {}", m.probability(t));
        }
        // Unseen words only: the intercept alone.
        let none = m.probability("zzz qqq");
        assert!((none - sigmoid(f64::from(m.bias))).abs() < 1e-12);
        let mut ts = HashMap::new();
        m.tensors("lex", &mut ts).unwrap();
        let back = Lexical::from_tensors("lex", &ts, Path::new("x")).unwrap();
        assert_eq!(back.as_ref(), Some(&m));
        assert!(
            Lexical::from_tensors("other", &ts, Path::new("x"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn training_refuses_one_class_and_mismatched_lengths() {
        let o = LexicalOptions::default();
        assert!(Lexical::train(&["a", "b"], &[true, true], &o).is_err());
        assert!(Lexical::train(&["a", "b"], &[true], &o).is_err());
    }
}
