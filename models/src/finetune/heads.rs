//! The heads being trained ([`TrainHead`]) and every variable of a run
//! ([`Trainable`]).

use candle_core::{Tensor, Var};

use crate::Error;
use crate::heads::{Head, HeadSpec, Rng};
use crate::lora::Adapters;

/// A head being trained: the weights of [`Head`] as variables.
#[derive(Debug, Clone)]
pub struct TrainHead {
    pub(super) spec: HeadSpec,
    pub(super) w1: Var,
    pub(super) b1: Var,
    pub(super) w2: Option<(Var, Var)>,
}

impl TrainHead {
    pub(super) fn init(spec: &HeadSpec, dim: usize, rng: &mut Rng) -> Result<Self, Error> {
        let out = spec.labels.len();
        let first = if spec.hidden > 0 { spec.hidden } else { out };
        let w1 = crate::heads::init(rng, first, dim)?;
        let b1 = crate::heads::zeros(first)?;
        let w2 = if spec.hidden > 0 {
            Some((
                crate::heads::init(rng, out, spec.hidden)?,
                crate::heads::zeros(out)?,
            ))
        } else {
            None
        };
        Ok(Self {
            spec: spec.clone(),
            w1,
            b1,
            w2,
        })
    }

    /// Logits `(n, labels)` of embeddings `(n, dim)`: the math of
    /// [`Head::logits`].
    pub fn logits(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = x.matmul(&self.w1.t()?)?.broadcast_add(&self.b1)?;
        match &self.w2 {
            Some((w2, b2)) => h.relu()?.matmul(&w2.t()?)?.broadcast_add(b2),
            None => Ok(h),
        }
    }

    /// The trained head (temperature 1).
    pub fn to_head(&self) -> Result<Head, Error> {
        Head::from_weights(
            self.spec.clone(),
            self.w1.as_tensor().copy()?,
            self.b1.as_tensor().copy()?,
            self.w2
                .as_ref()
                .map(|(w, b)| {
                    Ok::<_, candle_core::Error>((w.as_tensor().copy()?, b.as_tensor().copy()?))
                })
                .transpose()?,
            1.0,
        )
    }

    /// `(name, var)` for each weight: `head.<name>.w1`, `.b1`, `.w2`, `.b2`.
    pub fn vars(&self) -> Vec<(String, Var)> {
        let p = format!("head.{}", self.spec.name);
        let mut out = vec![
            (format!("{p}.w1"), self.w1.clone()),
            (format!("{p}.b1"), self.b1.clone()),
        ];
        if let Some((w, b)) = &self.w2 {
            out.push((format!("{p}.w2"), w.clone()));
            out.push((format!("{p}.b2"), b.clone()));
        }
        out
    }
}

/// Everything a run trains: the adapters and the three heads.
#[derive(Debug, Clone)]
pub struct Trainable {
    /// The adapters.
    pub adapters: Adapters,
    /// tom_kind.
    pub tom_kind: TrainHead,
    /// affect.
    pub affect: TrainHead,
    /// intensity.
    pub intensity: TrainHead,
    /// sensitive content, when the run has the head.
    pub sensitive: Option<TrainHead>,
}

impl Trainable {
    /// Every trainable variable with a stable name, in a fixed order:
    /// `lora.<layer key>.a`/`.b`, then the heads' weights.
    pub fn vars(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (key, a, b) in self.adapters.pairs() {
            out.push((format!("lora.{key}.a"), a.clone()));
            out.push((format!("lora.{key}.b"), b.clone()));
        }
        for h in [&self.tom_kind, &self.affect, &self.intensity]
            .into_iter()
            .chain(&self.sensitive)
        {
            out.extend(h.vars());
        }
        out
    }
}
