//! Classification heads on top of the sentence embedding: tom_kind
//! (multi-label, one sigmoid per kind), affect and intensity (softmax),
//! each a small MLP or a linear layer, with a calibration temperature.
//!
//! Heads are trained here with candle (AdamW, seeded initialisation and
//! batch order, so training is reproducible) and saved as one safetensors
//! file plus a JSON card.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::rows::HeadInput;

/// How a head is shaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadSpec {
    /// `tom_kind`, `affect` or `intensity`.
    pub name: String,
    /// Output labels, in logit order.
    pub labels: Vec<String>,
    /// Independent sigmoids (true) or one softmax (false).
    pub multi_label: bool,
    /// Width of the hidden layer; `0` for a linear head.
    pub hidden: usize,
    /// Whether the head reads the embedding followed by the text's
    /// [`crate::cues::wording_cues`] (`CUES` more columns); older cards
    /// lack the field and read the embedding alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wording_cues: bool,
}

/// A trained head.
#[derive(Debug, Clone)]
pub struct Head {
    /// Its shape.
    pub spec: HeadSpec,
    w1: Tensor,
    b1: Tensor,
    w2: Option<(Tensor, Tensor)>,
    /// Calibration temperature (logits are divided by it).
    pub temperature: f64,
}

/// Training settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainOptions {
    /// Passes over the training set.
    pub epochs: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// AdamW learning rate.
    pub learning_rate: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Seed of the initialisation and the batch order.
    pub seed: u64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            epochs: 30,
            batch_size: 128,
            learning_rate: 2e-3,
            weight_decay: 1e-4,
            seed: 17,
        }
    }
}

/// Targets of a training set.
#[derive(Debug, Clone)]
pub enum Targets {
    /// One label index per example, with a loss weight per example.
    Single {
        /// Label index per example.
        labels: Vec<u32>,
        /// Loss weight per example.
        weights: Vec<f32>,
    },
    /// A 0/1 vector per example; -1 marks a label as unknown for that
    /// example (left out of the loss: a curator's rejection says one kind
    /// is wrong and nothing of the others).
    Multi(Vec<Vec<f32>>),
}

/// A small deterministic generator (SplitMix64): initialisation and shuffling.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeds the generator.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The generator's state: [`Rng::new`] of it continues the sequence.
    pub fn state(&self) -> u64 {
        self.0
    }

    /// Uniform in [-a, a).
    pub fn uniform(&mut self, a: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * u - 1.0) * a
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            xs.swap(i, j);
        }
    }
}

pub(crate) fn init(rng: &mut Rng, rows: usize, cols: usize) -> Result<Var, Error> {
    let a = (6.0 / (rows + cols) as f32).sqrt();
    let data: Vec<f32> = (0..rows * cols).map(|_| rng.uniform(a)).collect();
    Ok(Var::from_tensor(&Tensor::from_vec(
        data,
        (rows, cols),
        &Device::Cpu,
    )?)?)
}

pub(crate) fn zeros(n: usize) -> Result<Var, Error> {
    Ok(Var::from_tensor(&Tensor::zeros(
        n,
        DType::F32,
        &Device::Cpu,
    )?)?)
}

impl Head {
    /// A head from its weights: `w1` `(first, dim)` and `b1` `(first,)`,
    /// then for an MLP (`spec.hidden > 0`, `first = hidden`) `w2`
    /// `(labels, hidden)` and `b2` `(labels,)` after a ReLU; a linear head
    /// has `first = labels` and no `w2`. Errors when the shapes do not fit
    /// the spec.
    pub fn from_weights(
        spec: HeadSpec,
        w1: Tensor,
        b1: Tensor,
        w2: Option<(Tensor, Tensor)>,
        temperature: f64,
    ) -> Result<Self, Error> {
        let out = spec.labels.len();
        let first = if spec.hidden > 0 { spec.hidden } else { out };
        let (rows, _) = w1.dims2()?;
        let ok = rows == first
            && b1.dims1()? == first
            && match &w2 {
                Some((w, b)) => spec.hidden > 0 && w.dims2()? == (out, first) && b.dims1()? == out,
                None => spec.hidden == 0,
            };
        if !ok {
            return Err(Error::InvalidOptions {
                reason: format!("head {}: weights do not fit its spec", spec.name),
            });
        }
        Ok(Self {
            spec,
            w1,
            b1,
            w2,
            temperature,
        })
    }

    /// Raw logits for a batch of embeddings `[n, dim]` ([`crate::Rows`] or
    /// a tensor).
    pub fn logits(&self, x: &(impl HeadInput + ?Sized)) -> Result<Tensor, Error> {
        let x = x.tensor()?;
        let h = x.matmul(&self.w1.t()?)?.broadcast_add(&self.b1)?;
        Ok(match &self.w2 {
            Some((w2, b2)) => h.relu()?.matmul(&w2.t()?)?.broadcast_add(b2)?,
            None => h,
        })
    }

    /// [`Head::logits`] as one row of floats per embedding.
    pub fn logits_rows(&self, x: &(impl HeadInput + ?Sized)) -> Result<Vec<Vec<f32>>, Error> {
        Ok(self.logits(x)?.to_vec2::<f32>()?)
    }

    /// Calibrated probabilities for a batch: per row, one per label.
    pub fn probabilities(&self, x: &(impl HeadInput + ?Sized)) -> Result<Vec<Vec<f32>>, Error> {
        let z = (self.logits(x)? / self.temperature)?;
        let p = if self.spec.multi_label {
            candle_nn::ops::sigmoid(&z)?
        } else {
            candle_nn::ops::softmax_last_dim(&z)?
        };
        Ok(p.to_vec2::<f32>()?)
    }

    /// The linear head whose weights are the mean of `members`' weights:
    /// its logits are the mean of theirs, so a bagged ensemble of linear
    /// heads runs as one head. Errors when `members` is empty, when one has
    /// a hidden layer (their logits would not average this way), or when
    /// their shapes differ. The temperature is 1.
    pub fn average(members: &[Head]) -> Result<Self, Error> {
        let Some(first) = members.first() else {
            return Err(Error::InvalidOptions {
                reason: "no heads to average".into(),
            });
        };
        if members
            .iter()
            .any(|m| m.w2.is_some() || m.spec != first.spec)
        {
            return Err(Error::InvalidOptions {
                reason: "only linear heads of one spec can be averaged".into(),
            });
        }
        let k = members.len() as f64;
        let mean = |get: fn(&Head) -> &Tensor| -> Result<Tensor, Error> {
            let stacked = Tensor::stack(&members.iter().map(get).collect::<Vec<_>>(), 0)?;
            Ok((stacked.sum(0)? / k)?)
        };
        Ok(Self {
            spec: first.spec.clone(),
            w1: mean(|h| &h.w1)?,
            b1: mean(|h| &h.b1)?,
            w2: None,
            temperature: 1.0,
        })
    }

    /// Trains a head from embeddings `x` (`[n, dim]`: [`crate::Rows`] or a
    /// tensor) and targets.
    pub fn train(
        spec: HeadSpec,
        x: &(impl HeadInput + ?Sized),
        targets: &Targets,
        opts: &TrainOptions,
        mut on_epoch: impl FnMut(usize, f64),
    ) -> Result<Self, Error> {
        let x = x.tensor()?;
        let (n, dim) = x.dims2()?;
        let out = spec.labels.len();
        let mut rng = Rng::new(opts.seed);
        let first = if spec.hidden > 0 { spec.hidden } else { out };
        let w1 = init(&mut rng, first, dim)?;
        let b1 = zeros(first)?;
        let second = if spec.hidden > 0 {
            Some((init(&mut rng, out, spec.hidden)?, zeros(out)?))
        } else {
            None
        };
        let mut vars = vec![w1.clone(), b1.clone()];
        if let Some((w, b)) = &second {
            vars.extend([w.clone(), b.clone()]);
        }
        let mut opt = AdamW::new(
            vars,
            ParamsAdamW {
                lr: opts.learning_rate,
                weight_decay: opts.weight_decay,
                ..Default::default()
            },
        )?;
        let head = |w1: &Var, b1: &Var, second: &Option<(Var, Var)>| Head {
            spec: spec.clone(),
            w1: w1.as_tensor().clone(),
            b1: b1.as_tensor().clone(),
            w2: second
                .as_ref()
                .map(|(w, b)| (w.as_tensor().clone(), b.as_tensor().clone())),
            temperature: 1.0,
        };
        let mut order: Vec<u32> = (0..n as u32).collect();
        for epoch in 0..opts.epochs {
            rng.shuffle(&mut order);
            let mut total = 0.0;
            let mut steps = 0;
            for chunk in order.chunks(opts.batch_size) {
                let idx = Tensor::new(chunk, &Device::Cpu)?;
                let xb = x.index_select(&idx, 0)?;
                let logits = head(&w1, &b1, &second).logits(&xb)?;
                let loss = match targets {
                    Targets::Single { labels, weights } => {
                        let y: Vec<u32> = chunk.iter().map(|&i| labels[i as usize]).collect();
                        let w: Vec<f32> = chunk.iter().map(|&i| weights[i as usize]).collect();
                        let y = Tensor::new(y.as_slice(), &Device::Cpu)?;
                        let w = Tensor::new(w.as_slice(), &Device::Cpu)?;
                        let lp = candle_nn::ops::log_softmax(&logits, 1)?;
                        let picked = lp.gather(&y.unsqueeze(1)?, 1)?.squeeze(1)?;
                        ((picked * &w)?.sum_all()?.neg()?
                            / w.sum_all()?.to_scalar::<f32>()? as f64)?
                    }
                    Targets::Multi(ys) => {
                        let flat: Vec<f32> = chunk
                            .iter()
                            .flat_map(|&i| ys[i as usize].iter().copied())
                            .collect();
                        // Unknown labels (-1) are left out of the loss.
                        let mask: Vec<f32> = flat
                            .iter()
                            .map(|&v| if v < 0.0 { 0.0 } else { 1.0 })
                            .collect();
                        let kept = mask.iter().sum::<f32>().max(1.0);
                        let y: Vec<f32> = flat.iter().map(|&v| v.max(0.0)).collect();
                        let y = Tensor::from_vec(y, (chunk.len(), out), &Device::Cpu)?;
                        let m = Tensor::from_vec(mask, (chunk.len(), out), &Device::Cpu)?;
                        // max(z, 0) - z·y + log(1 + exp(-|z|)), per element:
                        // finite for any logit. (candle's
                        // `binary_cross_entropy_with_logit` takes the log of
                        // the sigmoid, which is log 0 = -inf once a logit
                        // passes about ±17 in f32, and the loss turns NaN.)
                        let per = ((logits.relu()? - (&logits * &y)?)?
                            + ((logits.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
                        ((per * m)?.sum_all()? / f64::from(kept))?
                    }
                };
                let value = f64::from(loss.to_scalar::<f32>()?);
                if !value.is_finite() {
                    return Err(Error::Diverged {
                        head: spec.name.clone(),
                        epoch: epoch + 1,
                        loss: value,
                    });
                }
                opt.backward_step(&loss)?;
                total += value;
                steps += 1;
            }
            on_epoch(epoch + 1, total / steps.max(1) as f64);
        }
        Ok(head(&w1, &b1, &second))
    }

    pub(crate) fn tensors(&self, out: &mut HashMap<String, Tensor>) {
        let p = &self.spec.name;
        out.insert(format!("{p}.w1"), self.w1.clone());
        out.insert(format!("{p}.b1"), self.b1.clone());
        if let Some((w, b)) = &self.w2 {
            out.insert(format!("{p}.w2"), w.clone());
            out.insert(format!("{p}.b2"), b.clone());
        }
    }

    pub(crate) fn from_tensors(
        spec: HeadSpec,
        temperature: f64,
        ts: &HashMap<String, Tensor>,
        file: &Path,
    ) -> Result<Self, Error> {
        let get = |k: &str| {
            ts.get(&format!("{}.{k}", spec.name))
                .cloned()
                .ok_or_else(|| Error::Heads {
                    path: file.to_path_buf(),
                    message: format!("tensor {}.{k} is missing", spec.name),
                })
        };
        let w2 = if spec.hidden > 0 {
            Some((get("w2")?, get("b2")?))
        } else {
            None
        };
        Ok(Self {
            w1: get("w1")?,
            b1: get("b1")?,
            w2,
            temperature,
            spec,
        })
    }
}

/// Writes one head and, optionally, a lexical model (tensors prefixed
/// `lexical`) to a safetensors file: what a trainer caches between runs.
/// The head's spec and temperature are the caller's to keep.
pub fn save_head_file(
    path: &Path,
    head: &Head,
    lexical: Option<&crate::lexical::Lexical>,
) -> Result<(), Error> {
    let mut ts = HashMap::new();
    head.tensors(&mut ts);
    if let Some(lexical) = lexical {
        lexical.tensors(HEAD_FILE_LEXICAL, &mut ts)?;
    }
    candle_core::safetensors::save(&ts, path).map_err(|e| Error::Heads {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Reads what [`save_head_file`] wrote: the head of `spec` (with
/// `temperature`) and the lexical model when the file has one.
pub fn load_head_file(
    path: &Path,
    spec: HeadSpec,
    temperature: f64,
) -> Result<(Head, Option<crate::lexical::Lexical>), Error> {
    let ts = candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| Error::Heads {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok((
        Head::from_tensors(spec, temperature, &ts, path)?,
        crate::lexical::Lexical::from_tensors(HEAD_FILE_LEXICAL, &ts, path)?,
    ))
}

/// The tensor-name prefix of a lexical model in a [`save_head_file`] file.
const HEAD_FILE_LEXICAL: &str = "lexical";

/// What the card says about one head.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadCard {
    /// Its shape.
    pub spec: HeadSpec,
    /// Calibration temperature.
    pub temperature: f64,
    /// Dev metrics (free-form, written by the trainer).
    pub metrics: serde_json::Value,
}

/// The JSON card that ships with the heads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Card {
    /// sha256 of the encoder weights the heads were trained on.
    pub encoder_sha256: String,
    /// The heads, in order: tom_kind, affect, intensity, then the optional
    /// ones by name (person, sensitive).
    pub heads: Vec<HeadCard>,
    /// sha256 of each training and dev file, by path.
    pub training_data: serde_json::Value,
    /// Training settings.
    pub training: serde_json::Value,
    /// Everything else the trainer wants on record.
    #[serde(default)]
    pub notes: serde_json::Value,
    /// P(tag right) from the two best kinds' probabilities; cards without
    /// it tag with the kind's own probability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_calibration: Option<crate::metrics::TagCalibration>,
    /// Edge confidences and thresholds; cards without it propose no edges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edges: Option<crate::metrics::EdgeCalibration>,
}

/// The three heads and their card.
#[derive(Debug, Clone)]
pub struct Heads {
    /// tom_kind (multi-label).
    pub tom_kind: Head,
    /// affect.
    pub affect: Head,
    /// intensity.
    pub intensity: Head,
    /// Whether a candidate name is a person, from its words in context and
    /// its shape (optional: older cards have none).
    pub person: Option<Head>,
    /// Sensitive content: a softmax over `none` and the sensitive
    /// categories, so P(sensitive) = 1 − P(none) (optional: older cards
    /// have none, and only the identifier rules run).
    pub sensitive: Option<Head>,
    /// Sensitive content, read from the words: P(sensitive) of a lexical
    /// model (`crate::lexical`) that the detector averages with the
    /// head's (optional: older heads have none).
    pub sensitive_lexical: Option<crate::lexical::Lexical>,
    /// The card.
    pub card: Card,
}

/// The tensor-name prefix of [`Heads::sensitive_lexical`].
const SENSITIVE_LEXICAL: &str = "sensitive_lexical";

/// File names under the heads directory.
pub const HEADS_FILE: &str = "heads.safetensors";
/// The card's file name.
pub const CARD_FILE: &str = "card.json";

impl Heads {
    /// Loads `heads.safetensors` and `card.json` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let card_path = dir.join(CARD_FILE);
        let text = std::fs::read_to_string(&card_path).map_err(|source| Error::Io {
            op: "read",
            path: card_path.clone(),
            source,
        })?;
        let card: Card = serde_json::from_str(&text).map_err(|e| Error::Heads {
            path: card_path.clone(),
            message: e.to_string(),
        })?;
        let file = dir.join(HEADS_FILE);
        let ts = candle_core::safetensors::load(&file, &Device::Cpu).map_err(|e| Error::Heads {
            path: file.clone(),
            message: e.to_string(),
        })?;
        let head = |i: usize, name: &str| -> Result<Head, Error> {
            let c = card
                .heads
                .get(i)
                .filter(|c| c.spec.name == name)
                .ok_or_else(|| Error::Heads {
                    path: card_path.clone(),
                    message: format!("head {i} must be {name}"),
                })?;
            Head::from_tensors(c.spec.clone(), c.temperature, &ts, &file)
        };
        let named = |name: &str| -> Result<Option<Head>, Error> {
            card.heads
                .iter()
                .skip(3)
                .find(|c| c.spec.name == name)
                .map(|c| Head::from_tensors(c.spec.clone(), c.temperature, &ts, &file))
                .transpose()
        };
        // Only the record-level heads read the wording cues: the others
        // are applied to sentences and candidates without their text.
        if let Some(c) = card.heads.iter().find(|c| {
            c.spec.wording_cues && !matches!(c.spec.name.as_str(), "affect" | "intensity")
        }) {
            return Err(Error::Heads {
                path: card_path.clone(),
                message: format!("head {} cannot read the wording cues", c.spec.name),
            });
        }
        Ok(Self {
            tom_kind: head(0, "tom_kind")?,
            affect: head(1, "affect")?,
            intensity: head(2, "intensity")?,
            person: named("person")?,
            sensitive: named("sensitive")?,
            sensitive_lexical: crate::lexical::Lexical::from_tensors(
                SENSITIVE_LEXICAL,
                &ts,
                &file,
            )?,
            card,
        })
    }

    /// Writes the heads and the card (with the current temperatures) to `dir`.
    pub fn save(&mut self, dir: &Path) -> Result<(), Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            op: "create",
            path: dir.to_path_buf(),
            source,
        })?;
        let mut ts = HashMap::new();
        for (i, h) in [&self.tom_kind, &self.affect, &self.intensity]
            .into_iter()
            .enumerate()
        {
            h.tensors(&mut ts);
            if let Some(c) = self.card.heads.get_mut(i) {
                c.temperature = h.temperature;
                c.spec = h.spec.clone();
            }
        }
        for h in self.person.iter().chain(&self.sensitive) {
            h.tensors(&mut ts);
            let name = &h.spec.name;
            match self
                .card
                .heads
                .iter_mut()
                .skip(3)
                .find(|c| &c.spec.name == name)
            {
                Some(c) => {
                    c.temperature = h.temperature;
                    c.spec = h.spec.clone();
                }
                None => self.card.heads.push(HeadCard {
                    spec: h.spec.clone(),
                    temperature: h.temperature,
                    metrics: serde_json::Value::Null,
                }),
            }
        }
        if let Some(lexical) = &self.sensitive_lexical {
            lexical.tensors(SENSITIVE_LEXICAL, &mut ts)?;
        }
        let file = dir.join(HEADS_FILE);
        candle_core::safetensors::save(&ts, &file).map_err(|e| Error::Heads {
            path: file.clone(),
            message: e.to_string(),
        })?;
        let card_path = dir.join(CARD_FILE);
        let mut json = serde_json::to_string_pretty(&self.card).map_err(|e| Error::Heads {
            path: card_path.clone(),
            message: e.to_string(),
        })?;
        json.push('\n');
        std::fs::write(&card_path, json).map_err(|source| Error::Io {
            op: "write",
            path: card_path,
            source,
        })
    }
}
