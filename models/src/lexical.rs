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
//!
//! [`Concepts`] add one feature per named word list: every word of a list
//! counts towards its list's feature, so a word training never saw
//! ("epilepsy") still carries the weight its list learned from the words
//! it did see ("chemo", "biopsy"). The lists are part of the model (stored
//! with it), so inference reads the text as training did.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::Error;

/// Hash buckets of the features (2^20: collisions are rare at the few
/// tens of thousands of n-grams a training set has).
pub const BUCKETS: u32 = 1 << 20;

/// Named word lists, each adding one feature (its name's bucket) for each
/// of its words a text holds. An entry is a lower-case word, or a stem of
/// at least [`MIN_STEM`] characters ending in `*` that matches any word
/// starting with it (`bankrupt*`). A word's possessive `'s` is dropped
/// before matching.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Concepts {
    /// (name, entries), in the order given.
    lists: Vec<(String, Vec<String>)>,
    /// Word → the lists it is in.
    exact: HashMap<String, Vec<usize>>,
    /// (stem, list), for the entries ending in `*`.
    stems: Vec<(String, usize)>,
}

/// The shortest stem a `*` entry may have.
pub const MIN_STEM: usize = 5;

impl Concepts {
    /// Checks and indexes `lists`.
    ///
    /// # Errors
    /// An empty or repeated list name, an empty list, or an entry that is
    /// not one lower-case word (letters, digits, inner apostrophes), or a
    /// stem shorter than [`MIN_STEM`]; the error names the list and entry.
    pub fn new(lists: Vec<(String, Vec<String>)>) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidOptions { reason };
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        let mut stems = Vec::new();
        for (i, (name, entries)) in lists.iter().enumerate() {
            if name.is_empty() || lists[..i].iter().any(|(n, _)| n == name) {
                return Err(invalid(format!(
                    "concept list {i}: the name {name:?} is empty or repeated"
                )));
            }
            if entries.is_empty() {
                return Err(invalid(format!("concept list {name:?} has no entries")));
            }
            for e in entries {
                let (word, stem) = match e.strip_suffix('*') {
                    Some(w) => (w, true),
                    None => (e.as_str(), false),
                };
                if words(word) != [word] {
                    return Err(invalid(format!(
                        "concept list {name:?}: entry {e:?} is not one lower-case word"
                    )));
                }
                if stem {
                    if word.chars().count() < MIN_STEM {
                        return Err(invalid(format!(
                            "concept list {name:?}: the stem {e:?} is shorter than {MIN_STEM} characters"
                        )));
                    }
                    stems.push((word.to_string(), i));
                } else {
                    let lists = exact.entry(word.to_string()).or_default();
                    if !lists.contains(&i) {
                        lists.push(i);
                    }
                }
            }
        }
        Ok(Self {
            lists,
            exact,
            stems,
        })
    }

    /// Whether there are no lists.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// The lists' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.lists.iter().map(|(n, _)| n.as_str())
    }

    /// The lists `word` (lower case, as [`words`] gives it) belongs to,
    /// each once.
    fn lists_of(&self, word: &str) -> Vec<usize> {
        let word = word
            .strip_suffix("'s")
            .filter(|w| !w.is_empty())
            .unwrap_or(word);
        let mut out = self.exact.get(word).cloned().unwrap_or_default();
        for (stem, i) in &self.stems {
            if word.starts_with(stem.as_str()) && !out.contains(i) {
                out.push(*i);
            }
        }
        out
    }

    /// The bucket of list `i`'s feature: its name behind a byte no word
    /// holds, so it never shares a word's bucket by construction of the
    /// key (only by a hash collision).
    fn bucket(&self, i: usize) -> u32 {
        fnv1a(&["\u{1}concept", &self.lists[i].0]) % BUCKETS
    }

    fn to_json(&self) -> String {
        serde_json::to_string(&self.lists).unwrap_or_default()
    }

    fn from_json(s: &str) -> Result<Self, Error> {
        let lists: Vec<(String, Vec<String>)> =
            serde_json::from_str(s).map_err(|e| Error::InvalidOptions {
                reason: format!("concept lists: {e}"),
            })?;
        Self::new(lists)
    }
}

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
    /// Word lists that each add a feature (none by default).
    pub concepts: Concepts,
}

impl Default for LexicalOptions {
    fn default() -> Self {
        Self {
            c: 16.0,
            steps: 400,
            learning_rate: 0.05,
            concepts: Concepts::default(),
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
    /// The word lists whose features it was fitted with.
    concepts: Concepts,
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

/// The hashed unigrams and bigrams of `text`, and the features of the
/// `concepts` its words are in, with their sublinear term frequency
/// (1 + ln tf), sorted by bucket.
pub fn term_frequencies(text: &str, concepts: &Concepts) -> Vec<(u32, f32)> {
    let w = words(text);
    let mut tf: BTreeMap<u32, u32> = BTreeMap::new();
    for (i, a) in w.iter().enumerate() {
        *tf.entry(fnv1a(&[a]) % BUCKETS).or_default() += 1;
        if let Some(b) = w.get(i + 1) {
            *tf.entry(fnv1a(&[a, b]) % BUCKETS).or_default() += 1;
        }
        for c in concepts.lists_of(a) {
            *tf.entry(concepts.bucket(c)).or_default() += 1;
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
        let tfs: Vec<Vec<(u32, f32)>> = texts
            .iter()
            .map(|t| term_frequencies(t, &opts.concepts))
            .collect();
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
            concepts: opts.concepts.clone(),
        })
    }

    /// P(positive | `text`).
    pub fn probability(&self, text: &str) -> f64 {
        let v: Vec<(f32, f32)> = term_frequencies(text, &self.concepts)
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

    /// The word lists it was fitted with.
    pub fn concepts(&self) -> &Concepts {
        &self.concepts
    }

    /// The weight a list's feature learned (`None`: no such list, or no
    /// training text held one of its words).
    pub fn concept_weight(&self, name: &str) -> Option<f32> {
        let i = self.concepts.lists.iter().position(|(n, _)| n == name)?;
        self.terms.get(&self.concepts.bucket(i)).map(|t| t.1)
    }

    /// The model as tensors named `<prefix>.buckets` (u32),
    /// `<prefix>.idf`, `<prefix>.weight` and `<prefix>.bias` (f32), and,
    /// with word lists, `<prefix>.concepts` (u8: the lists as JSON).
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
        if !self.concepts.is_empty() {
            let json = self.concepts.to_json().into_bytes();
            let n = json.len();
            out.insert(
                format!("{prefix}.concepts"),
                Tensor::from_vec(json, n, &dev)?,
            );
        }
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
        // Models fitted before word lists existed have none.
        let concepts = match ts.get(&format!("{prefix}.concepts")) {
            None => Concepts::default(),
            Some(t) => {
                let bytes: Vec<u8> = t.to_dtype(DType::U8)?.to_vec1()?;
                let json = String::from_utf8(bytes)
                    .map_err(|_| bad(format!("{prefix}.concepts is not UTF-8")))?;
                Concepts::from_json(&json).map_err(|e| bad(format!("{prefix}.concepts: {e}")))?
            }
        };
        Ok(Some(Self {
            terms: buckets
                .into_iter()
                .zip(idf.into_iter().zip(weight))
                .collect(),
            bias: bias[0],
            concepts,
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

    fn lists(v: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        v.iter()
            .map(|(n, e)| (n.to_string(), e.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    // A word training never saw carries its list's weight: the list
    // learned it from the words it did see.
    #[test]
    fn a_concept_list_gives_an_unseen_word_its_weight_and_round_trips() {
        let concepts = Concepts::new(lists(&[
            ("health", &["chemo", "biopsy", "insulin", "epilep*"]),
            ("money", &["overdraft", "arrears"]),
        ]))
        .unwrap();
        let pos = [
            "chemo starts on the fourth",
            "the biopsy came back clear",
            "my insulin ran out",
        ];
        let neg = [
            "booked the tennis court",
            "the bank holiday was lovely",
            "painted the fence green",
        ];
        let texts: Vec<&str> = pos.iter().chain(&neg).copied().collect();
        let labels: Vec<bool> = (0..6).map(|i| i < 3).collect();
        let plain = Lexical::train(&texts, &labels, &LexicalOptions::default()).unwrap();
        let opts = LexicalOptions {
            concepts: concepts.clone(),
            ..LexicalOptions::default()
        };
        let m = Lexical::train(&texts, &labels, &opts).unwrap();
        // "epileptic" is in no training text: only its list speaks for it.
        let unseen = "she is epileptic";
        assert!(
            (plain.probability(unseen) - sigmoid(f64::from(plain.bias))).abs() < 1e-12,
            "without lists an unseen word is the intercept"
        );
        assert!(m.probability(unseen) > 0.5, "{}", m.probability(unseen));
        assert!(m.concept_weight("health").unwrap() > 0.0);
        // A list no training text touched has no weight.
        assert_eq!(m.concept_weight("money"), None);
        assert_eq!(m.concept_weight("nope"), None);
        // Possessives match; other words do not.
        assert_eq!(concepts.lists_of("biopsy's"), [0]);
        assert_eq!(concepts.lists_of("epilepsy"), [0]);
        assert!(concepts.lists_of("epic").is_empty());
        let mut ts = HashMap::new();
        m.tensors("lex", &mut ts).unwrap();
        assert!(ts.contains_key("lex.concepts"));
        let back = Lexical::from_tensors("lex", &ts, Path::new("x"))
            .unwrap()
            .unwrap();
        assert_eq!(back, m);
        assert_eq!(back.probability(unseen), m.probability(unseen));
        // A model without lists stores none and reads back without them.
        let mut ts = HashMap::new();
        plain.tensors("lex", &mut ts).unwrap();
        assert!(!ts.contains_key("lex.concepts"));
    }

    #[test]
    fn concept_lists_refuse_bad_entries_naming_them() {
        let err = |v: &[(&str, &[&str])]| Concepts::new(lists(v)).unwrap_err().to_string();
        assert!(err(&[("health", &["two words"])]).contains("\"two words\""));
        assert!(err(&[("health", &["Chemo"])]).contains("\"Chemo\""));
        assert!(err(&[("health", &["chem*"])]).contains("shorter than 5"));
        assert!(err(&[("health", &[])]).contains("no entries"));
        assert!(err(&[("a", &["x"]), ("a", &["y"])]).contains("repeated"));
        let mut ts = HashMap::new();
        let m = Lexical::train(
            &["chemo today", "garden today"],
            &[true, false],
            &LexicalOptions::default(),
        )
        .unwrap();
        m.tensors("lex", &mut ts).unwrap();
        let bad = br#"[["health",["Bad Entry"]]]"#.to_vec();
        let n = bad.len();
        ts.insert(
            "lex.concepts".into(),
            Tensor::from_vec(bad, n, &Device::Cpu).unwrap(),
        );
        let e = Lexical::from_tensors("lex", &ts, Path::new("heads.safetensors")).unwrap_err();
        assert!(e.to_string().contains("lex.concepts"), "{e}");
    }

    #[test]
    fn training_refuses_one_class_and_mismatched_lengths() {
        let o = LexicalOptions::default();
        assert!(Lexical::train(&["a", "b"], &[true, true], &o).is_err());
        assert!(Lexical::train(&["a", "b"], &[true], &o).is_err());
    }
}
