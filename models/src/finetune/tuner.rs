//! [`FineTuner`]: the base weights and tokenizer a run starts from, the
//! losses of a batch and the training loop.

use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use candle_nn::ParamsAdamW;

use super::adapters::FineTuned;
use super::checkpoint::{CheckpointState, fingerprint, load_checkpoint, save_checkpoint};
use super::examples::{epoch_batches, is_affect_only, validate};
use super::heads::{TrainHead, Trainable};
use super::model::{Batch, Tokens, TrainBert};
use super::optim::{AdamW, Losses};
use super::{CHECKPOINT_STATE_FILE, Example, FineTuneOptions, HeadSpecs, Progress};
use crate::Error;
use crate::encoder::{Base, BaseTokenizer, EncodeOptions};
use crate::heads::Rng;
use crate::lora::Adapters;

/// Texts per forward pass when computing base vectors.
pub(super) const BASE_VECTOR_BATCH: usize = 32;

/// The encoder's base weights, tokenizer and differentiable forward: what
/// fine-tuning starts from.
pub struct FineTuner {
    pub(super) model: TrainBert,
    pub(super) tokenizer: BaseTokenizer,
    pub(super) sha256: String,
}

impl std::fmt::Debug for FineTuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FineTuner")
            .field("sha256", &self.sha256)
            .field("config", &self.model.config)
            .finish_non_exhaustive()
    }
}

impl FineTuner {
    /// Loads the model directory (`config.json`, `model.safetensors`,
    /// `tokenizer.json`) the encoder loads.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let base = Base::load(dir, EncodeOptions::default())?;
        let model = TrainBert::from_weights(&base.config, &base.weights)?;
        Ok(Self {
            model,
            tokenizer: base.tokenizer,
            sha256: base.sha256,
        })
    }

    /// The differentiable forward pass.
    pub fn model(&self) -> &TrainBert {
        &self.model
    }

    /// sha256 of the base weights.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Token ids and type ids of each text, with special tokens, cut to
    /// `max_tokens` (capped at the model's positions) as the encoder cuts.
    pub fn tokenize(&self, texts: &[&str], max_tokens: usize) -> Result<Vec<Tokens>, Error> {
        use rayon::prelude::*;
        let max = max_tokens.min(self.model.config.max_position_embeddings);
        if max <= self.tokenizer.added_tokens {
            return Err(Error::InvalidOptions {
                reason: format!("max_tokens {max_tokens} leaves no room for the text"),
            });
        }
        texts
            .par_iter()
            .enumerate()
            .map(|(i, t)| {
                let (e, _) = crate::encoder::tokenize(
                    &self.tokenizer.tokenizer,
                    self.tokenizer.added_tokens,
                    max,
                    t,
                    i,
                    false,
                )?;
                Ok((e.get_ids().to_vec(), e.get_type_ids().to_vec()))
            })
            .collect()
    }

    /// A padded batch of `texts`.
    pub fn batch(&self, texts: &[&str], max_tokens: usize) -> Result<Batch, Error> {
        Batch::new(
            &self.tokenize(texts, max_tokens)?,
            self.model.config.pad_token_id,
        )
    }

    /// Fresh adapters and heads for `opts.seed`: the adapters first, then
    /// tom_kind, affect and intensity, from one generator.
    pub fn init(&self, specs: &HeadSpecs, opts: &FineTuneOptions) -> Result<Trainable, Error> {
        let mut rng = Rng::new(opts.seed);
        let dim = self.model.config.hidden_size;
        let adapters = Adapters::init(&self.model.config, &opts.lora, &mut rng)?;
        Ok(Trainable {
            adapters,
            tom_kind: TrainHead::init(&specs.tom_kind, dim, &mut rng)?,
            affect: TrainHead::init(&specs.affect, dim, &mut rng)?,
            intensity: TrainHead::init(&specs.intensity, dim, &mut rng)?,
            sensitive: specs
                .sensitive
                .as_ref()
                .map(|spec| TrainHead::init(spec, dim, &mut rng))
                .transpose()?,
        })
    }

    /// The masked losses of `examples` run as one batch (`batch` built from
    /// their texts). Each head's loss is the mean over the examples (and,
    /// for tom_kind, the kinds) that carry its target, weighted by class for
    /// affect and intensity; a head no example of the batch has a target
    /// for contributes 0, and its weights get a zero gradient.
    ///
    /// `anchors` holds, per example, its base vector ([`FineTuner::base_vectors`])
    /// or `None`; the similarity term is the mean of 1 − cos over the
    /// examples that have one, weighted by `opts.similarity_weight` in the
    /// total.
    pub fn losses(
        &self,
        state: &Trainable,
        batch: &Batch,
        examples: &[&Example],
        anchors: &[Option<&[f32]>],
        opts: &FineTuneOptions,
    ) -> Result<Losses, Error> {
        let n = examples.len();
        if n != batch.len() {
            return Err(Error::InvalidOptions {
                reason: format!("{n} examples for a batch of {}", batch.len()),
            });
        }
        let x = self.model.forward(batch, Some(&state.adapters))?;
        let d = &Device::Cpu;

        // tom_kind: binary cross-entropy per known (example, kind).
        let kinds = state.tom_kind.spec.labels.len();
        let z = state.tom_kind.logits(&x)?;
        let (mut y, mut m) = (Vec::with_capacity(n * kinds), Vec::with_capacity(n * kinds));
        for e in examples {
            match &e.tom_kind {
                Some(t) => {
                    y.extend(t.iter().map(|&v| v.max(0.0)));
                    m.extend(t.iter().map(|&v| if v < 0.0 { 0f32 } else { 1.0 }));
                }
                None => {
                    y.extend(std::iter::repeat_n(0f32, kinds));
                    m.extend(std::iter::repeat_n(0f32, kinds));
                }
            }
        }
        let kept = m.iter().sum::<f32>().max(1.0);
        let y = Tensor::from_vec(y, (n, kinds), d)?;
        let m = Tensor::from_vec(m, (n, kinds), d)?;
        // max(z, 0) - z·y + log(1 + exp(-|z|)), per element.
        let per = ((z.relu()? - (&z * &y)?)? + ((z.abs()?.neg()?.exp()? + 1.0)?.log()?))?;
        let tom_kind = ((per * m)?.sum_all()? / f64::from(kept))?;

        let single = |head: &TrainHead,
                      target: fn(&Example) -> Option<u32>,
                      weights: &[f32]|
         -> Result<Tensor, Error> {
            let z = head.logits(&x)?;
            let mut labels = Vec::with_capacity(n);
            let mut w = Vec::with_capacity(n);
            for e in examples {
                let (l, wi) = match target(e) {
                    Some(l) => (l, weights.get(l as usize).copied().unwrap_or(1.0)),
                    None => (0, 0.0),
                };
                labels.push(l);
                w.push(wi);
            }
            let total: f32 = w.iter().sum();
            let labels = Tensor::from_vec(labels, (n, 1), d)?;
            let w = Tensor::from_vec(w, n, d)?;
            let lp = candle_nn::ops::log_softmax(&z, 1)?;
            let picked = lp.gather(&labels, 1)?.squeeze(1)?;
            let denom = if total > 0.0 { f64::from(total) } else { 1.0 };
            Ok(((picked * w)?.sum_all()?.neg()? / denom)?)
        };
        let affect = single(&state.affect, |e| e.affect, &opts.affect_class_weights)?;
        let intensity = single(
            &state.intensity,
            |e| e.intensity,
            &opts.intensity_class_weights,
        )?;
        let sensitive = match &state.sensitive {
            Some(head) => single(head, |e| e.sensitive, &opts.sensitive_class_weights)?,
            None => Tensor::zeros((), DType::F32, d)?,
        };
        let similarity = self.similarity(&x, anchors)?;
        let total = (((&tom_kind + &affect)? + &intensity)? + &sensitive)?;
        let total = if opts.similarity_weight > 0.0 {
            (total + (&similarity * opts.similarity_weight)?)?
        } else {
            total
        };
        Ok(Losses {
            total,
            tom_kind,
            affect,
            intensity,
            sensitive,
            similarity,
        })
    }

    /// Mean 1 − cos of the rows of `x` (unit vectors) and their anchors,
    /// over the rows that have one.
    pub(super) fn similarity(
        &self,
        x: &Tensor,
        anchors: &[Option<&[f32]>],
    ) -> Result<Tensor, Error> {
        let (n, dim) = x.dims2()?;
        let kept = anchors.iter().filter(|a| a.is_some()).count();
        if kept == 0 {
            return Ok(Tensor::zeros((), DType::F32, &Device::Cpu)?);
        }
        if anchors.len() != n {
            return Err(Error::InvalidOptions {
                reason: format!("{} anchors for a batch of {n}", anchors.len()),
            });
        }
        let mut a = Vec::with_capacity(n * dim);
        let mut m = Vec::with_capacity(n);
        for anchor in anchors {
            match anchor {
                Some(v) if v.len() == dim => {
                    a.extend_from_slice(v);
                    m.push(1f32);
                }
                Some(v) => {
                    return Err(Error::InvalidOptions {
                        reason: format!("an anchor of {} values for vectors of {dim}", v.len()),
                    });
                }
                None => {
                    a.extend(std::iter::repeat_n(0f32, dim));
                    m.push(0.0);
                }
            }
        }
        let a = Tensor::from_vec(a, (n, dim), &Device::Cpu)?;
        let m = Tensor::from_vec(m, n, &Device::Cpu)?;
        let cos = (x * a)?.sum(1)?;
        let gap = ((cos.neg()? + 1.0)? * m)?.sum_all()?;
        Ok((gap / kept as f64)?)
    }

    /// The base encoder's sentence vectors of `texts` (no adapters, no
    /// gradient), in input order: the anchors of the similarity term.
    pub fn base_vectors(&self, texts: &[&str], max_tokens: usize) -> Result<Vec<Vec<f32>>, Error> {
        let tokens = self.tokenize(texts, max_tokens)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| tokens[i].0.len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(BASE_VECTOR_BATCH) {
            let rows: Vec<Tokens> = chunk.iter().map(|&i| tokens[i].clone()).collect();
            let batch = Batch::new(&rows, self.model.config.pad_token_id)?;
            let v = self.model.forward(&batch, None)?.to_vec2::<f32>()?;
            for (&i, row) in chunk.iter().zip(v) {
                out[i] = row;
            }
        }
        Ok(out)
    }

    /// Fine-tunes adapters and heads on `examples`.
    ///
    /// Each epoch draws a batch order from the seed (examples of similar
    /// length batched together, the batches in random order), runs
    /// `ceil(n / batch_size)` AdamW steps, and, with a checkpoint
    /// directory, writes a checkpoint. With `opts.resume` and a checkpoint
    /// there, the run continues after its last finished epoch (an error
    /// when the checkpoint belongs to other settings, heads or examples;
    /// `epochs` may grow). `progress` is called after every step.
    pub fn train(
        &self,
        examples: &[Example],
        specs: &HeadSpecs,
        opts: &FineTuneOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<FineTuned, Error> {
        validate(examples, specs, opts)?;
        let fingerprint = fingerprint(examples, specs, opts)?;
        let tokens = {
            let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
            self.tokenize(&texts, opts.max_tokens)?
        };
        let state = self.init(specs, opts)?;
        let vars = state.vars();
        let params = ParamsAdamW {
            lr: opts.learning_rate,
            weight_decay: opts.weight_decay,
            ..ParamsAdamW::default()
        };
        let mut adam = AdamW::new(&vars, params)?;
        let mut rng = Rng::new(opts.seed ^ 0x5851_F42D_4C95_7F2D);
        let mut first_epoch = 0;
        let mut epoch_losses = Vec::new();
        if let Some(dir) = opts.checkpoint_dir.as_deref().filter(|_| opts.resume)
            && dir.join(CHECKPOINT_STATE_FILE).is_file()
        {
            let cp = load_checkpoint(dir, &vars, &mut adam, &fingerprint)?;
            first_epoch = cp.epoch;
            rng = Rng::new(cp.rng_state);
            epoch_losses = cp.epoch_losses;
        }
        // The similarity term's anchors: base vectors of the examples with
        // a tom_kind target (records and sentences), computed once.
        let anchors: Vec<Option<Vec<f32>>> = if opts.similarity_weight > 0.0 {
            let which: Vec<usize> = (0..examples.len())
                .filter(|&i| examples[i].tom_kind.is_some() || examples[i].sensitive.is_some())
                .collect();
            let texts: Vec<&str> = which.iter().map(|&i| examples[i].text.as_str()).collect();
            let vectors = self.base_vectors(&texts, opts.max_tokens)?;
            let mut out = vec![None; examples.len()];
            for (i, v) in which.into_iter().zip(vectors) {
                out[i] = Some(v);
            }
            out
        } else {
            vec![None; examples.len()]
        };
        // Affect-only examples are drawn afresh each epoch when asked; the
        // others are in every epoch.
        let (kept, pool): (Vec<usize>, Vec<usize>) =
            (0..examples.len()).partition(|&i| !is_affect_only(&examples[i]));
        let drawn = opts
            .affect_only_per_epoch
            .map_or(pool.len(), |k| k.min(pool.len()));
        let n = kept.len() + drawn;
        let per_epoch = n.div_ceil(opts.batch_size);
        let steps = per_epoch * opts.epochs;
        let started = Instant::now();
        let mut seen = 0usize;
        let mut step = adam.step_count();
        let lengths: Vec<usize> = tokens.iter().map(|(ids, _)| ids.len()).collect();
        for epoch in first_epoch..opts.epochs {
            let mut members = kept.clone();
            if drawn < pool.len() {
                let mut pool = pool.clone();
                rng.shuffle(&mut pool);
                members.extend_from_slice(&pool[..drawn]);
            } else {
                members.extend_from_slice(&pool);
            }
            let batches = epoch_batches(&members, &lengths, opts.batch_size, &mut rng);
            let mut sum = 0.0;
            for (i, chunk) in batches.iter().enumerate() {
                let rows: Vec<Tokens> = chunk.iter().map(|&j| tokens[j].clone()).collect();
                let batch = Batch::new(&rows, self.model.config.pad_token_id)?;
                let picked: Vec<&Example> = chunk.iter().map(|&j| &examples[j]).collect();
                let anchored: Vec<Option<&[f32]>> =
                    chunk.iter().map(|&j| anchors[j].as_deref()).collect();
                let losses = self.losses(&state, &batch, &picked, &anchored, opts)?;
                let grads = losses.total.backward()?;
                adam.step(&vars, &grads)?;
                let loss = f64::from(losses.total.to_scalar::<f32>()?);
                sum += loss;
                step += 1;
                seen += chunk.len();
                let rate = seen as f64 / started.elapsed().as_secs_f64().max(1e-9);
                let left = (steps - step.min(steps)) as f64 * opts.batch_size as f64;
                let epoch_done = i + 1 == per_epoch;
                progress(&Progress {
                    epoch: epoch + 1,
                    epochs: opts.epochs,
                    step,
                    steps,
                    loss,
                    epoch_loss: sum / (i + 1) as f64,
                    examples_per_s: rate,
                    eta: Duration::from_secs_f64(left / rate.max(1e-9)),
                    epoch_done,
                });
            }
            epoch_losses.push(sum / per_epoch.max(1) as f64);
            if let Some(dir) = &opts.checkpoint_dir {
                save_checkpoint(
                    dir,
                    &vars,
                    &adam,
                    &CheckpointState {
                        epoch: epoch + 1,
                        step: adam.step_count(),
                        rng_state: rng.state(),
                        fingerprint: fingerprint.clone(),
                        epoch_losses: epoch_losses.clone(),
                    },
                )?;
            }
        }
        Ok(FineTuned {
            adapters: state.adapters.clone(),
            tom_kind: state.tom_kind.to_head()?,
            affect: state.affect.to_head()?,
            intensity: state.intensity.to_head()?,
            sensitive: state
                .sensitive
                .as_ref()
                .map(TrainHead::to_head)
                .transpose()?,
            base_sha256: self.sha256.clone(),
            options: opts.clone(),
            epoch_losses,
        })
    }
}
