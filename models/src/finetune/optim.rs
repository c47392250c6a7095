//! The loss terms of a step ([`Losses`]) and the optimiser ([`AdamW`]),
//! whose moments a checkpoint keeps.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::ParamsAdamW;

use crate::Error;

/// The per-head losses of a batch, and their sum (what is minimised).
#[derive(Debug, Clone)]
pub struct Losses {
    /// tom_kind + affect + intensity + sensitive + similarity × its weight.
    pub total: Tensor,
    /// Masked binary cross-entropy of tom_kind.
    pub tom_kind: Tensor,
    /// Masked, class-weighted cross-entropy of affect.
    pub affect: Tensor,
    /// Masked, class-weighted cross-entropy of intensity.
    pub intensity: Tensor,
    /// Masked, class-weighted cross-entropy of sensitive content (0
    /// without the head).
    pub sensitive: Tensor,
    /// Mean 1 − cos(tuned vector, base vector) over the examples given an
    /// anchor (0 when none is).
    pub similarity: Tensor,
}

/// AdamW with candle's parameters and update rule, its state open for
/// checkpoints: per variable the first and second moments, and the step
/// count.
#[derive(Debug, Clone)]
pub struct AdamW {
    pub(super) params: ParamsAdamW,
    pub(super) step: usize,
    pub(super) moments: Vec<(Tensor, Tensor)>,
}

impl AdamW {
    /// Zero moments for `vars`.
    pub fn new(vars: &[(String, Var)], params: ParamsAdamW) -> Result<Self, Error> {
        let moments = vars
            .iter()
            .map(|(_, v)| Ok((v.zeros_like()?, v.zeros_like()?)))
            .collect::<Result<Vec<_>, candle_core::Error>>()?;
        Ok(Self {
            params,
            step: 0,
            moments,
        })
    }

    /// Steps taken.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// One update of `vars` (the same list, in the same order, as at
    /// [`AdamW::new`]) from `grads`; a variable without a gradient is left
    /// alone, as candle's AdamW does.
    pub fn step(&mut self, vars: &[(String, Var)], grads: &GradStore) -> Result<(), Error> {
        self.step += 1;
        let p = &self.params;
        let (lr, beta1, beta2) = (p.lr, p.beta1, p.beta2);
        let scale_m = 1f64 / (1f64 - beta1.powi(self.step as i32));
        let scale_v = 1f64 / (1f64 - beta2.powi(self.step as i32));
        for ((_, theta), (m, v)) in vars.iter().zip(self.moments.iter_mut()) {
            if let Some(g) = grads.get(theta) {
                let next_m = ((&*m * beta1)? + (g * (1.0 - beta1))?)?;
                let next_v = ((&*v * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
                let m_hat = (&next_m * scale_m)?;
                let v_hat = (&next_v * scale_v)?;
                let next_theta = (theta.as_tensor() * (1f64 - lr * p.weight_decay))?;
                let adjusted = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
                theta.set(&(next_theta - (adjusted * lr)?)?)?;
                *m = next_m;
                *v = next_v;
            }
        }
        Ok(())
    }
}
