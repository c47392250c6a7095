//! Fused CPU kernels for the encoder's inference path.
//!
//! candle's generic ops cost the encoder more than its matrix products on
//! short texts: the exact GELU calls a scalar `erf` per element, and
//! attention runs as one small matrix product per (text, head) plus a
//! transpose, a copy, a scale, a mask add and a softmax pass, each a tensor
//! of its own. Here:
//!
//! - [`erf`] and [`exp`]: f32 approximations the compiler vectorises for
//!   AVX2 (Eigen's and XLA's rational `erf`, absolute error under 1e-6;
//!   Cephes' `expf`, relative error about 2e-7).
//! - [`attention`]: scaled dot-product attention read straight from the
//!   fused `[q | k | v]` projection, one pass per query row: scores against
//!   the keys of the same text only (texts are packed one after another,
//!   with no padding to mask), softmax with a vectorisable `exp`, and the
//!   weighted sum of values, written in `(rows, hidden)` order. Texts run
//!   in parallel.
//!
//! - [`bias_gelu`] and [`bias_residual_layer_norm`]: the epilogues of the
//!   feed-forward and output projections in one pass each, so that a
//!   layer's only other work is its matrix products, and candle's
//!   element-wise thread pool (which spins between ops and competes with
//!   the matrix products' threads on a 2-core machine) is not woken inside
//!   the layers.
//!
//! All are inference-only (`apply_op*_no_bwd`); the encoder is not trained
//! here.
//!
//! The crate is compiled for AVX2. On a kernel path with AVX-512 the GELU
//! and layer-norm loops run inside [`simd::wide`], which recompiles them
//! for zmm registers (measured on an AVX-512 Xeon: bias + GELU 0.173 →
//! 0.122 s over 2,000 texts). Attention on 16 lanes was measured too and
//! was no faster (0.36–0.38 s against 0.36–0.39 s on 8: its loops are
//! short, a text's keys, not the registers' width), so it stays on AVX2.

use crate::simd::{self, Kernels};
use candle_core::backend::BackendStorage as _;
use candle_core::{CpuStorage, CustomOp2, InplaceOp2, InplaceOp3, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Lanes the hand-unrolled loops accumulate over (one AVX2 register of f32).
const LANES: usize = 8;

/// Rows per parallel task of the row-wise kernels.
const ROWS_PER_TASK: usize = 16;

/// The f32 elements of a contiguous tensor's storage.
fn contiguous_f32<'a>(what: &str, storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(src) = storage else {
        candle_core::bail!("{what}: f32 only, got {:?}", storage.dtype())
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: input must be contiguous")
    };
    Ok(&src[start..end])
}

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

struct Attention<'a> {
    lengths: &'a [usize],
    heads: usize,
    scale: f32,
}

impl CustomOp2 for Attention<'_> {
    fn name(&self) -> &'static str {
        "tomlite-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let qkv = contiguous_f32("attention", s1, l1)?;
        let bias = contiguous_f32("attention bias", s2, l2)?;
        let (rows, three_h) = l1.shape().dims2()?;
        if three_h % 3 != 0
            || (three_h / 3) % self.heads != 0
            || self.lengths.iter().sum::<usize>() != rows
            || bias.len() != three_h
        {
            candle_core::bail!(
                "attention: shape ({rows}, {three_h}) does not fit {} heads, lengths summing to {} and a bias of {}",
                self.heads,
                self.lengths.iter().sum::<usize>(),
                bias.len()
            );
        }
        let hidden = three_h / 3;
        let d = hidden / self.heads;
        let mut out = vec![0f32; rows * hidden];
        // One (output, input) pair of slices per text, in parallel.
        let mut texts: Vec<(&mut [f32], &[f32])> = Vec::with_capacity(self.lengths.len());
        let (mut rest_out, mut rest_in) = (out.as_mut_slice(), qkv);
        for &len in self.lengths {
            let (o, ro) = rest_out.split_at_mut(len * hidden);
            let (i, ri) = rest_in.split_at(len * three_h);
            texts.push((o, i));
            (rest_out, rest_in) = (ro, ri);
        }
        texts.into_par_iter().for_each(|(out, qkv)| {
            let len = qkv.len() / three_h;
            // Keys are laid out in rows of `width` (len rounded up to a
            // whole register, zero-filled), so that every score loop runs
            // on full AVX2 vectors with no scalar remainder.
            let width = len.div_ceil(LANES) * LANES;
            let mut scores = vec![0f32; width];
            // One head's keys, transposed (d rows of width), and values
            // (len rows of d), biases added.
            let mut kt = vec![0f32; d * width];
            let mut v = vec![0f32; len * d];
            let mut q = vec![0f32; d];
            for h in 0..self.heads {
                let (qo, ko, vo) = (h * d, hidden + h * d, 2 * hidden + h * d);
                for j in 0..len {
                    let row = &qkv[j * three_h..(j + 1) * three_h];
                    for c in 0..d {
                        kt[c * width + j] = row[ko + c] + bias[ko + c];
                    }
                    for ((v, &x), &bv) in v[j * d..(j + 1) * d]
                        .iter_mut()
                        .zip(&row[vo..vo + d])
                        .zip(&bias[vo..vo + d])
                    {
                        *v = x + bv;
                    }
                }
                for i in 0..len {
                    let row = &qkv[i * three_h + qo..i * three_h + qo + d];
                    for ((q, &x), &bq) in q.iter_mut().zip(row).zip(&bias[qo..qo + d]) {
                        *q = (x + bq) * self.scale;
                    }
                    // Fixed-size chunks of one register each: a loop of
                    // runtime length under 32 would run scalar (the
                    // vectorised body takes 4 registers per iteration).
                    let (chunks, _) = scores.as_chunks_mut::<LANES>();
                    for (j, acc) in chunks.iter_mut().enumerate() {
                        let mut sum = [0f32; LANES];
                        for (&qc, keys) in q.iter().zip(kt.chunks_exact(width)) {
                            let k = &keys[j * LANES..(j + 1) * LANES];
                            for (s, &k) in sum.iter_mut().zip(k) {
                                *s += qc * k;
                            }
                        }
                        *acc = sum;
                    }
                    // The padding keys' scores are 0: lift them out of
                    // the maximum, lane by lane (plain comparisons compile
                    // to `vmaxps`; `f32::max` would carry its NaN rule).
                    chunks.as_flattened_mut()[len..].fill(f32::NEG_INFINITY);
                    let mut lanes = [f32::NEG_INFINITY; LANES];
                    for chunk in chunks.iter() {
                        for (m, &s) in lanes.iter_mut().zip(chunk) {
                            if s > *m {
                                *m = s;
                            }
                        }
                    }
                    let max = lanes
                        .iter()
                        .fold(f32::NEG_INFINITY, |m, &s| if s > m { s } else { m });
                    for chunk in chunks.iter_mut() {
                        for s in chunk.iter_mut() {
                            *s = exp(*s - max);
                        }
                    }
                    scores[len..].fill(0.0);
                    let inv = 1.0 / lane_sum(&scores);
                    let o = &mut out[i * hidden + h * d..i * hidden + h * d + d];
                    if d == 32 {
                        weighted_sum::<32>(&scores[..len], inv, &v, o);
                    } else if d == 64 {
                        weighted_sum::<64>(&scores[..len], inv, &v, o);
                    } else {
                        for (&p, v) in scores[..len].iter().zip(v.chunks_exact(d)) {
                            for (o, &v) in o.iter_mut().zip(v) {
                                *o += p * inv * v;
                            }
                        }
                    }
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from_dims(&[rows, hidden])))
    }
}

/// `out = Σ_j p[j]·inv·v[j]` for one query and head of width `D`, the sum
/// kept in registers (`D / 8` of them) and stored once: accumulating into
/// `out` itself chains every key through a store and a reload.
#[inline(always)]
fn weighted_sum<const D: usize>(p: &[f32], inv: f32, v: &[f32], out: &mut [f32]) {
    let mut acc = [0f32; D];
    for (&p, v) in p.iter().zip(v.as_chunks::<D>().0) {
        let w = p * inv;
        for (a, &v) in acc.iter_mut().zip(v) {
            *a += w * v;
        }
    }
    out.copy_from_slice(&acc);
}

/// Multi-head scaled dot-product attention from a fused projection, over
/// texts packed one after another without padding.
///
/// `qkv`: `(rows, 3·hidden)` f32, the query, key and value projections side
/// by side before their `bias` (`3·hidden`) is added; the first
/// `lengths[0]` rows are the first text, the next `lengths[1]` the second,
/// and so on (`Σ lengths = rows`). A text attends to its own rows only.
/// Returns `(rows, hidden)` with heads concatenated, as BERT's
/// `attention.self` does.
pub fn attention(
    qkv: &Tensor,
    bias: &Tensor,
    lengths: &[usize],
    heads: usize,
    scale: f32,
) -> Result<Tensor> {
    qkv.contiguous()?.apply_op2_no_bwd(
        &bias.contiguous()?,
        &Attention {
            lengths,
            heads,
            scale,
        },
    )
}

struct BiasGelu {
    kernels: Kernels,
}

/// The `f32` elements of a contiguous tensor's storage, writable.
fn contiguous_f32_mut<'a>(
    what: &str,
    storage: &'a mut CpuStorage,
    layout: &Layout,
) -> Result<&'a mut [f32]> {
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: input must be contiguous")
    };
    let CpuStorage::F32(src) = storage else {
        candle_core::bail!("{what}: f32 only, got {:?}", storage.dtype())
    };
    Ok(&mut src[start..end])
}

impl InplaceOp2 for BiasGelu {
    fn name(&self) -> &'static str {
        "tomlite-bias-gelu"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let bias = contiguous_f32("bias_gelu bias", s2, l2)?;
        let xs = contiguous_f32_mut("bias_gelu", s1, l1)?;
        let n = bias.len();
        if n == 0 || xs.len() % n != 0 {
            candle_core::bail!("bias_gelu: {} values do not fit a bias of {n}", xs.len());
        }
        let kernels = self.kernels;
        xs.par_chunks_mut(n * ROWS_PER_TASK).for_each(|xs| {
            simd::wide(
                kernels,
                #[inline(always)]
                || {
                    for xs in xs.chunks_exact_mut(n) {
                        for (x, &b) in xs.iter_mut().zip(bias) {
                            let v = *x + b;
                            *x = 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
                        }
                    }
                },
            )
        });
        Ok(())
    }
}

/// `gelu_erf(xs + bias)`, `bias` broadcast over the rows of `xs`, into a
/// new tensor.
pub fn bias_gelu(xs: &Tensor, bias: &Tensor, kernels: Kernels) -> Result<Tensor> {
    let out = xs.copy()?;
    bias_gelu_in_place(&out, bias, kernels)?;
    Ok(out)
}

/// [`bias_gelu`] written over `xs` itself: no output allocation (6 MB per
/// 1,024-token batch, zeroed and page-faulted in each time). `xs` must be
/// contiguous, and no other tensor may share its storage (a fresh matrix
/// product's result).
pub fn bias_gelu_in_place(xs: &Tensor, bias: &Tensor, kernels: Kernels) -> Result<()> {
    xs.inplace_op2(&bias.contiguous()?, &BiasGelu { kernels })
}

struct BiasResidualNorm {
    eps: f32,
    kernels: Kernels,
}

impl InplaceOp3 for BiasResidualNorm {
    fn name(&self) -> &'static str {
        "tomlite-bias-residual-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let residual = contiguous_f32("layer_norm residual", s2, l2)?;
        let params = contiguous_f32("layer_norm params", s3, l3)?;
        let xs = contiguous_f32_mut("layer_norm", s1, l1)?;
        let n = params.len() / 3;
        if n == 0 || params.len() != 3 * n || xs.len() % n != 0 || residual.len() != xs.len() {
            candle_core::bail!(
                "layer_norm: {} values, {} residual values and {} parameters do not fit",
                xs.len(),
                residual.len(),
                params.len()
            );
        }
        let (bias, rest) = params.split_at(n);
        let (gamma, beta) = rest.split_at(n);
        let (eps, kernels) = (self.eps, self.kernels);
        xs.par_chunks_mut(n * ROWS_PER_TASK)
            .zip(residual.par_chunks(n * ROWS_PER_TASK))
            .for_each(|(xs, residual)| {
                simd::wide(
                    kernels,
                    #[inline(always)]
                    || {
                        for (out, residual) in xs.chunks_exact_mut(n).zip(residual.chunks_exact(n))
                        {
                            for ((o, &r), &b) in out.iter_mut().zip(residual).zip(bias) {
                                *o += r + b;
                            }
                            let mean = lane_sum(out) / n as f32;
                            let var = lane_sum_sq_dev(out, mean) / n as f32;
                            let inv = 1.0 / (var + eps).sqrt();
                            for ((o, &g), &b) in out.iter_mut().zip(gamma).zip(beta) {
                                *o = (*o - mean) * inv * g + b;
                            }
                        }
                    },
                )
            });
        Ok(())
    }
}

/// Sum of a slice in [`LANES`] lanes (vectorises; order differs from a
/// serial sum only in rounding).
#[inline(always)]
fn lane_sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `Σ (x − mean)²` in [`LANES`] lanes.
#[inline(always)]
fn lane_sum_sq_dev(xs: &[f32], mean: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail: f32 = chunks
        .remainder()
        .iter()
        .map(|&x| (x - mean) * (x - mean))
        .sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += (x - mean) * (x - mean);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `layer_norm(xs + bias + residual)` over the last dimension, with
/// `params` = `[bias; gamma; beta]` stacked as `(3, n)`; the variance is the
/// biased one and `eps` sits inside the square root, as in PyTorch.
pub fn bias_residual_layer_norm(
    xs: &Tensor,
    residual: &Tensor,
    params: &Tensor,
    eps: f32,
    kernels: Kernels,
) -> Result<Tensor> {
    let out = xs.copy()?;
    bias_residual_layer_norm_in_place(&out, residual, params, eps, kernels)?;
    Ok(out)
}

/// [`bias_residual_layer_norm`] written over `xs` itself (see
/// [`bias_gelu_in_place`] for when that is allowed).
pub fn bias_residual_layer_norm_in_place(
    xs: &Tensor,
    residual: &Tensor,
    params: &Tensor,
    eps: f32,
    kernels: Kernels,
) -> Result<()> {
    xs.inplace_op3(
        &residual.contiguous()?,
        &params.contiguous()?,
        &BiasResidualNorm { eps, kernels },
    )
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
        // Head widths of the generic path (12) and of the register paths
        // (32 is all-MiniLM-L6-v2's, 64 BERT-base's); lengths over a
        // register (8) and under it.
        for (heads, d) in [(4, 12), (2, 32), (1, 64)] {
            attention_case(heads, d);
        }
    }

    fn attention_case(heads: usize, d: usize) {
        let dev = candle_core::Device::Cpu;
        let (b, t) = (3, 11);
        let qkv = Tensor::randn(0f32, 1.0, (b, t, 3 * heads * d), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, 3 * heads * d, &dev).unwrap();
        let lengths = [11, 3, 9];
        let scale = 1.0 / (d as f64).sqrt();
        // The kernel takes the real rows of each text packed together.
        let packed: Vec<Tensor> = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| qkv.get(i).unwrap().narrow(0, 0, n).unwrap())
            .collect();
        let packed = Tensor::cat(&packed, 0).unwrap();
        let flat = attention(&packed, &bias, &lengths, heads, scale as f32)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let mut rows = flat.into_iter();
        let ours: Vec<Vec<Vec<f32>>> = lengths
            .iter()
            .map(|&n| {
                (0..t)
                    .map(|j| {
                        if j < n {
                            rows.next().unwrap()
                        } else {
                            vec![0.0; heads * d]
                        }
                    })
                    .collect()
            })
            .collect();
        let with_bias = qkv.broadcast_add(&bias).unwrap();
        let theirs = reference(&with_bias, &lengths, heads, scale)
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

    /// On every kernel path this CPU has (AVX-512 ones run the loops on
    /// zmm registers, [`simd::wide`]); paths it lacks are reported skipped.
    #[test]
    fn bias_gelu_and_layer_norm_match_candle_on_every_path() {
        let dev = candle_core::Device::Cpu;
        // 400 wide: whole zmm and ymm registers and a remainder.
        let (rows, n) = (37, 400);
        let xs = Tensor::randn(0f32, 2.0, (rows, n), &dev).unwrap();
        let residual = Tensor::randn(0f32, 1.0, (rows, n), &dev).unwrap();
        let bias = Tensor::randn(0f32, 1.0, n, &dev).unwrap();
        let gamma = Tensor::randn(1f32, 0.1, n, &dev).unwrap();
        let beta = Tensor::randn(0f32, 0.1, n, &dev).unwrap();
        let params = Tensor::stack(&[&bias, &gamma, &beta], 0).unwrap();
        let gelu = xs.broadcast_add(&bias).unwrap().gelu_erf().unwrap();
        let summed = xs.broadcast_add(&bias).unwrap().add(&residual).unwrap();
        let norm = candle_nn::ops::layer_norm_slow(&summed, &gamma, &beta, 1e-12).unwrap();
        let max_diff = |a: Tensor, b: &Tensor| {
            (a - b)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        for path in simd::PATHS {
            let kernels = match Kernels::force(path) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("skipped: epilogues on {path} ({e})");
                    continue;
                }
            };
            let ours = bias_gelu(&xs, &bias, kernels).unwrap();
            assert!(max_diff(ours, &gelu) < 1e-5, "{path}: GELU");
            let ours = bias_residual_layer_norm(&xs, &residual, &params, 1e-12, kernels).unwrap();
            assert!(max_diff(ours, &norm) < 1e-4, "{path}: layer norm");
        }
    }
}
