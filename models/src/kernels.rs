//! Fused CPU kernels for the encoder's inference path.
//!
//! candle's generic ops cost the encoder more than its matrix products on
//! short texts: the exact GELU calls a scalar `erf` per element, and
//! attention runs as one small matrix product per (text, head) plus a
//! transpose, a copy, a scale, a mask add and a softmax pass, each a tensor
//! of its own. Here:
//!
//! - [`gelu_erf`]: `x·Φ(x)` with a rational approximation of `erf` (the one
//!   Eigen and XLA use for f32; absolute error under 1e-6 against the exact
//!   function) that the compiler vectorises for AVX2.
//! - [`attention`]: scaled dot-product attention read straight from the
//!   fused `[q | k | v]` projection, one pass per query row: scores against
//!   the real keys only (padding keys are skipped, not masked with −∞),
//!   softmax with a vectorisable `exp`, and the weighted sum of values,
//!   written in `(batch, seq, hidden)` order. Padding query rows are left
//!   zero: nothing reads them (pooling and the other layers' row-wise ops
//!   never mix rows). Texts run in parallel.
//!
//! Both are inference-only (`apply_op1_no_bwd`); the encoder is not
//! trained here.

use candle_core::backend::BackendStorage as _;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Lanes the hand-unrolled loops accumulate over (one AVX2 register of f32).
const LANES: usize = 8;

/// Error function, `erf(x)`, as a rational function of `x` clamped to
/// [−4, 4] (Eigen's `generic_fast_erf_float`); absolute error < 1e-6.
#[inline(always)]
#[allow(clippy::excessive_precision)] // the coefficients as published
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = p * x2 + -2.101_024e-6;
    p = p * x2 + -5.692_506_4e-5;
    p = p * x2 + -7.349_906_3e-4;
    p = p * x2 + -2.954_599_8e-3;
    p = p * x2 + -1.609_603_3e-2;
    p *= x;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = q * x2 + -1.682_827e-3;
    q = q * x2 + -7.373_329_4e-3;
    q = q * x2 + -1.426_473_9e-2;
    p / q
}

/// `e^x` for f32 by range reduction to `x = n·ln 2 + r` and a degree-6
/// polynomial in `r` (Cephes' `expf`); relative error ≈ 2e-7 on
/// [−87, 88], and it vectorises. Inputs below −87 give ≈ 0.
#[inline(always)]
#[allow(clippy::excessive_precision)] // the coefficients as published
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = x - n * 0.693_359_375 - n * -2.121_944_4e-4;
    let mut y = 1.987_569_1e-4_f32;
    y = y * r + 1.398_2e-3;
    y = y * r + 8.333_452e-3;
    y = y * r + 4.166_579_6e-2;
    y = y * r + 1.666_666_5e-1;
    y = y * r + 5.000_000_1e-1;
    y = y * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `x·Φ(x) = x/2·(1 + erf(x/√2))` for a slice.
pub fn gelu_erf_slice(src: &[f32], dst: &mut [f32]) {
    for (d, &x) in dst.iter_mut().zip(src) {
        *d = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "tomlite-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(src) = storage else {
            candle_core::bail!("gelu_erf: f32 only, got {:?}", storage.dtype())
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("gelu_erf: input must be contiguous")
        };
        let src = &src[start..end];
        let mut dst = vec![0f32; src.len()];
        const CHUNK: usize = 1 << 14;
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| gelu_erf_slice(s, d));
        Ok((CpuStorage::F32(dst), layout.shape().clone()))
    }
}

/// Exact-form GELU on an f32 tensor with the fast [`erf`]; other dtypes
/// take candle's own `gelu_erf`.
pub fn gelu_erf(xs: &Tensor) -> Result<Tensor> {
    if xs.dtype() != candle_core::DType::F32 || !matches!(xs.device(), candle_core::Device::Cpu) {
        return xs.gelu_erf();
    }
    xs.contiguous()?.apply_op1_no_bwd(&GeluErf)
}

/// Dot product of two equal-length slices, accumulated in [`LANES`] lanes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ac, ar) = a.split_at(a.len() - a.len() % LANES);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(LANES).zip(bc.chunks_exact(LANES)) {
        for ((acc, x), y) in acc.iter_mut().zip(x).zip(y) {
            *acc += x * y;
        }
    }
    let tail: f32 = ar.iter().zip(br).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

struct Attention<'a> {
    lengths: &'a [usize],
    heads: usize,
    scale: f32,
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "tomlite-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(src) = storage else {
            candle_core::bail!("attention: f32 only, got {:?}", storage.dtype())
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("attention: input must be contiguous")
        };
        let (b, t, three_h) = layout.shape().dims3()?;
        if three_h % 3 != 0 || (three_h / 3) % self.heads != 0 || self.lengths.len() != b {
            candle_core::bail!(
                "attention: shape ({b}, {t}, {three_h}) does not fit {} heads and {} lengths",
                self.heads,
                self.lengths.len()
            );
        }
        let hidden = three_h / 3;
        let d = hidden / self.heads;
        let qkv = &src[start..end];
        let mut out = vec![0f32; b * t * hidden];
        out.par_chunks_mut(t * hidden)
            .zip(qkv.par_chunks(t * three_h))
            .zip(self.lengths.par_iter())
            .for_each(|((out, qkv), &len)| {
                let len = len.min(t);
                let mut probs = vec![0f32; len];
                for h in 0..self.heads {
                    let (qo, ko, vo) = (h * d, hidden + h * d, 2 * hidden + h * d);
                    for i in 0..len {
                        let q = &qkv[i * three_h + qo..i * three_h + qo + d];
                        let mut max = f32::NEG_INFINITY;
                        for (j, p) in probs.iter_mut().enumerate() {
                            let k = &qkv[j * three_h + ko..j * three_h + ko + d];
                            *p = dot(q, k) * self.scale;
                            max = max.max(*p);
                        }
                        let mut sum = 0f32;
                        for p in probs.iter_mut() {
                            *p = exp(*p - max);
                            sum += *p;
                        }
                        let inv = 1.0 / sum;
                        let o = &mut out[i * hidden + h * d..i * hidden + h * d + d];
                        for (j, &p) in probs.iter().enumerate() {
                            let v = &qkv[j * three_h + vo..j * three_h + vo + d];
                            let w = p * inv;
                            for (o, &v) in o.iter_mut().zip(v) {
                                *o += w * v;
                            }
                        }
                    }
                }
            });
        Ok((CpuStorage::F32(out), Shape::from_dims(&[b, t, hidden])))
    }
}

/// Multi-head scaled dot-product attention from a fused projection.
///
/// `qkv`: `(batch, seq, 3·hidden)` f32, the query, key and value
/// projections side by side; `lengths[i]`: the real tokens of text `i`
/// (keys and queries past it are padding). Returns `(batch, seq, hidden)`
/// with heads concatenated, as BERT's `attention.self` does; padding rows
/// are zero.
pub fn attention(qkv: &Tensor, lengths: &[usize], heads: usize, scale: f32) -> Result<Tensor> {
    qkv.contiguous()?.apply_op1_no_bwd(&Attention {
        lengths,
        heads,
        scale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_the_exact_function() {
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f32 / 10_000.0;
            let err = (f64::from(erf(x)) - libm::erf(f64::from(x))).abs();
            worst = worst.max(err);
        }
        assert!(worst < 1e-6, "max |erf error| {worst}");
    }

    #[test]
    fn exp_matches_the_exact_function() {
        let mut worst = 0f64;
        for i in -870_000..=880_000 {
            let x = i as f32 / 10_000.0;
            let exact = f64::from(x).exp();
            let err = ((f64::from(exp(x)) - exact) / exact).abs();
            worst = worst.max(err);
        }
        assert!(worst < 1e-6, "max relative exp error {worst}");
        assert!(exp(-1e4) < 1e-37 && exp(-1e4) >= 0.0);
    }

    #[test]
    fn gelu_matches_candle_on_a_tensor() {
        let dev = candle_core::Device::Cpu;
        let xs: Vec<f32> = (0..5000).map(|i| (i as f32 - 2500.0) / 300.0).collect();
        let t = Tensor::from_vec(xs, (50, 100), &dev).unwrap();
        let ours = gelu_erf(&t)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let theirs = t
            .gelu_erf()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    /// Attention by candle's tensor ops with an additive mask, the
    /// reference the fused kernel must equal on real rows.
    fn reference(qkv: &Tensor, lengths: &[usize], heads: usize, scale: f64) -> Tensor {
        let (b, t, three_h) = qkv.dims3().unwrap();
        let hidden = three_h / 3;
        let d = hidden / heads;
        let split = |i: usize| {
            qkv.narrow(2, i * hidden, hidden)
                .unwrap()
                .reshape((b, t, heads, d))
                .unwrap()
                .transpose(1, 2)
                .unwrap()
                .contiguous()
                .unwrap()
        };
        let (q, k, v) = (split(0), split(1), split(2));
        let mask: Vec<f32> = lengths
            .iter()
            .flat_map(|&n| (0..t).map(move |j| if j < n { 0.0 } else { f32::MIN }))
            .collect();
        let mask = Tensor::from_vec(mask, (b, 1, 1, t), qkv.device()).unwrap();
        let scores = (q.matmul(&k.t().unwrap().contiguous().unwrap()).unwrap() * scale)
            .unwrap()
            .broadcast_add(&mask)
            .unwrap();
        let probs = candle_nn::ops::softmax_last_dim(&scores).unwrap();
        probs
            .matmul(&v)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((b, t, hidden))
            .unwrap()
    }

    #[test]
    fn attention_matches_masked_softmax_attention() {
        let dev = candle_core::Device::Cpu;
        let (b, t, heads, d) = (3, 7, 4, 12);
        let qkv = Tensor::randn(0f32, 1.0, (b, t, 3 * heads * d), &dev).unwrap();
        let lengths = [7, 3, 5];
        let scale = 1.0 / (d as f64).sqrt();
        let ours = attention(&qkv, &lengths, heads, scale as f32)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        let theirs = reference(&qkv, &lengths, heads, scale)
            .to_vec3::<f32>()
            .unwrap();
        for (i, &n) in lengths.iter().enumerate() {
            for row in 0..t {
                for c in 0..heads * d {
                    let (a, r) = (ours[i][row][c], theirs[i][row][c]);
                    if row < n {
                        assert!(
                            (a - r).abs() < 1e-5,
                            "text {i} row {row} col {c}: {a} vs {r}"
                        );
                    } else {
                        assert_eq!(a, 0.0, "padding row {row} of text {i} is zero");
                    }
                }
            }
        }
    }
}
