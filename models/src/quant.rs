//! Int8 linear layers: weights quantised to int8 per output channel, each
//! input row quantised to a symmetric integer grid per row (per token), and
//! an integer matrix product with exact i32 accumulation.
//!
//! # The kernel
//!
//! AVX2 has no f32-rate int8 × int8 multiply that cannot saturate
//! (`vpmaddubsw` adds two u8·i8 products into a saturating i16). The exact
//! one is `vpmaddwd`: 16 i16 · i16 products, summed in pairs into 8 i32
//! lanes, one instruction; Zen 3 retires two per cycle, which is 32
//! multiply-adds per cycle per core against 16 for f32 FMA. So the weights
//! are int8 values stored in i16 lanes, and the activations, which must be
//! i16 for the instruction anyway, get as many bits as the i32 accumulator
//! allows: with `|w| ≤ 127` over `k` products, `|x| ≤ (2³¹ − 1) / (127·k)`
//! keeps every partial sum exact (32,767 for k = 384, 11,008 for k = 1,536;
//! see [`activation_levels`]). The activation grid is therefore 15 bits at
//! most and 14 at least: the rounding error is the weights' alone, which is
//! what the accuracy bound of the encoder measures. `activation_bits` can
//! force a coarser grid (8 bits models int8 activations) for comparison.
//!
//! The product is tiled 6 rows × 2 output channels: per 16 positions of
//! `k`, 8 loads feed 12 `vpmaddwd` + 12 `vpaddd` into 12 accumulators,
//! which with the 2 weight registers, the row register and the product's
//! temporary fill the 16 ymm registers. Output channels are split into blocks of 24 (a block's
//! weights, 24 × k i16, stay in L1 for k = 384) that run in parallel.
//!
//! Without AVX2 at compile time the same tiles run as plain Rust (slow, but
//! exact and identical in result).

use candle_core::backend::BackendStorage as _;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Positions of `k` per step of the kernel (one ymm register of i16).
const STEP: usize = 16;
/// Rows per register tile.
const MR: usize = 6;
/// Output channels per register tile.
const NR: usize = 2;
/// Output channels per block of the sweep.
const BLOCK_N: usize = 24;
/// Rows per parallel task (a multiple of [`MR`]).
const ROWS_PER_TASK: usize = 48;
/// Largest magnitude of a quantised weight.
const WEIGHT_LEVELS: i32 = 127;

/// Largest activation magnitude that keeps every i32 partial sum exact for
/// inner dimension `k` with weights in ±127, capped at i16's ±32,767.
pub fn activation_levels(k: usize) -> i32 {
    let bound = i32::MAX as i64 / (WEIGHT_LEVELS as i64 * k.max(1) as i64);
    bound.min(i16::MAX as i64) as i32
}

/// A linear layer `y = x·Wᵀ (+ b)` with int8 weights.
#[derive(Debug, Clone)]
pub struct QuantLinear {
    /// Output channels.
    n: usize,
    /// Input width.
    k: usize,
    /// `k` rounded up to [`STEP`]; rows are zero-padded to it.
    kp: usize,
    /// `n × kp` int8 values in i16 lanes, row `j` = output channel `j`.
    weights: Vec<i16>,
    /// Per output channel: `W[j, ·] ≈ weights[j, ·] · scale[j]`.
    scales: Vec<f32>,
    /// Activation grid, `±levels`.
    levels: i32,
}

impl QuantLinear {
    /// Quantises a `(out, in)` f32 weight (Hugging Face's `Linear.weight`
    /// layout): per output channel, `scale = max |w| / 127`, values rounded
    /// to nearest. Activations use the finest exact grid
    /// ([`activation_levels`]).
    pub fn quantize(weight: &Tensor) -> Result<Self> {
        Self::quantize_with_activation_bits(weight, None)
    }

    /// Like [`QuantLinear::quantize`], with the activation grid limited to
    /// `bits` (sign included, so 8 means ±127); `None` for the finest.
    pub fn quantize_with_activation_bits(weight: &Tensor, bits: Option<u32>) -> Result<Self> {
        let (n, k) = weight.dims2()?;
        let rows = weight.to_dtype(candle_core::DType::F32)?.to_vec2::<f32>()?;
        let kp = k.div_ceil(STEP) * STEP;
        let mut weights = vec![0i16; n * kp];
        let mut scales = Vec::with_capacity(n);
        for (row, out) in rows.iter().zip(weights.chunks_exact_mut(kp)) {
            let max = row.iter().fold(0f32, |m, &w| m.max(w.abs()));
            let scale = if max > 0.0 {
                max / WEIGHT_LEVELS as f32
            } else {
                1.0
            };
            for (o, &w) in out.iter_mut().zip(row) {
                *o = (w / scale).round().clamp(-127.0, 127.0) as i16;
            }
            scales.push(scale);
        }
        let mut levels = activation_levels(kp);
        if let Some(bits) = bits {
            let cap = (1i64 << bits.clamp(2, 16).saturating_sub(1)) - 1;
            levels = levels.min(cap as i32);
        }
        Ok(Self {
            n,
            k,
            kp,
            weights,
            scales,
            levels,
        })
    }

    /// Output channels.
    pub fn out_features(&self) -> usize {
        self.n
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.k
    }

    /// The weights as f32 after the round trip through int8 (`(out, in)`),
    /// for measuring the quantisation error.
    pub fn dequantized(&self) -> Vec<f32> {
        self.weights
            .chunks_exact(self.kp)
            .zip(&self.scales)
            .flat_map(|(row, &s)| row[..self.k].iter().map(move |&q| q as f32 * s))
            .collect()
    }

    /// `xs`: `(rows, in)` f32 → `(rows, out)` f32, `xs·Wᵀ`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        xs.contiguous()?.apply_op1_no_bwd(self)
    }

    /// The product on plain slices: `xs` is `rows × in`, row-major.
    pub fn matmul(&self, xs: &[f32]) -> Vec<f32> {
        let rows = xs.len() / self.k.max(1);
        let (qx, sx) = self.quantize_rows(xs, rows);
        let mut out = vec![0f32; rows * self.n];
        self.product(&qx, &sx, rows, &mut out);
        out
    }

    /// Quantises each row of `xs` to `±levels` (zero-padded to `kp`);
    /// returns the values and the per-row scales.
    fn quantize_rows(&self, xs: &[f32], rows: usize) -> (Vec<i16>, Vec<f32>) {
        let (k, kp) = (self.k, self.kp);
        let mut q = vec![0i16; rows * kp];
        let mut scales = vec![0f32; rows];
        let levels = self.levels as f32;
        q.par_chunks_mut(kp * 64)
            .zip(xs.par_chunks(k * 64))
            .zip(scales.par_chunks_mut(64))
            .for_each(|((q, xs), scales)| {
                for ((q, x), s) in q.chunks_exact_mut(kp).zip(xs.chunks_exact(k)).zip(scales) {
                    let max = x.iter().fold(0f32, |m, &v| m.max(v.abs()));
                    let scale = if max > 0.0 { max / levels } else { 1.0 };
                    quantize_row(x, 1.0 / scale, q);
                    *s = scale;
                }
            });
        (q, scales)
    }

    /// `out[r, j] = Σ qx[r, ·]·w[j, ·] · sx[r] · scale[j]`: chunks of
    /// [`ROWS_PER_TASK`] rows in parallel, each swept over blocks of
    /// [`BLOCK_N`] output channels (a block's weights stay in L1 while the
    /// chunk's rows pass).
    fn product(&self, qx: &[i16], sx: &[f32], rows: usize, out: &mut [f32]) {
        let (n, kp) = (self.n, self.kp);
        if rows == 0 || n == 0 {
            return;
        }
        out.par_chunks_mut(ROWS_PER_TASK * n)
            .zip(qx.par_chunks(ROWS_PER_TASK * kp))
            .zip(sx.par_chunks(ROWS_PER_TASK))
            .for_each(|((out, qx), sx)| {
                for j0 in (0..n).step_by(BLOCK_N) {
                    self.block(qx, sx, j0, (j0 + BLOCK_N).min(n), out);
                }
            });
    }

    /// Output channels `j0..j1` of the rows `qx` (their scales `sx`) into
    /// the same rows of `out`.
    fn block(&self, qx: &[i16], sx: &[f32], j0: usize, j1: usize, out: &mut [f32]) {
        let (n, kp) = (self.n, self.kp);
        let rows = sx.len();
        let w = |j: usize| &self.weights[j * kp..(j + 1) * kp];
        let x = |r: usize| &qx[r * kp..(r + 1) * kp];
        let mut r = 0;
        while r < rows {
            let mr = (rows - r).min(MR);
            let mut j = j0;
            while j < j1 {
                let nr = (j1 - j).min(NR);
                let mut acc = [[0i32; NR]; MR];
                if (mr, nr) == (MR, NR) {
                    tile::<MR, NR>(
                        std::array::from_fn(|i| x(r + i)),
                        [w(j), w(j + 1)],
                        &mut acc,
                    );
                } else {
                    for (a, acc) in acc.iter_mut().enumerate().take(mr) {
                        for (c, acc) in acc.iter_mut().enumerate().take(nr) {
                            *acc = dot(x(r + a), w(j + c));
                        }
                    }
                }
                for (a, acc) in acc.iter().enumerate().take(mr) {
                    let row = &mut out[(r + a) * n + j..(r + a) * n + j + nr];
                    for ((o, &v), &s) in row.iter_mut().zip(acc).zip(&self.scales[j..j + nr]) {
                        *o = v as f32 * sx[r + a] * s;
                    }
                }
                j += nr;
            }
            r += mr;
        }
    }
}

impl CustomOp1 for QuantLinear {
    fn name(&self) -> &'static str {
        "tomlite-int8-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(src) = storage else {
            candle_core::bail!("int8 linear: f32 input only, got {:?}", storage.dtype())
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("int8 linear: input must be contiguous")
        };
        let (rows, k) = layout.shape().dims2()?;
        if k != self.k {
            candle_core::bail!("int8 linear: input width {k}, the layer takes {}", self.k);
        }
        let out = self.matmul(&src[start..end]);
        Ok((CpuStorage::F32(out), Shape::from_dims(&[rows, self.n])))
    }
}

/// `q[i] = round(x[i] · inv)` (ties to even), for `|x · inv| ≤ 32,767`.
#[cfg(target_feature = "avx2")]
fn quantize_row(x: &[f32], inv: f32, q: &mut [i16]) {
    use safe_arch::{convert_to_i32_m256i_from_m256, m256, m256i, mul_m256};
    let (chunks, tail) = x.as_chunks::<8>();
    let scale = m256::from([inv; 8]);
    for (c, q) in chunks.iter().zip(q.chunks_exact_mut(8)) {
        // vcvtps2dq rounds to nearest even, as `round_ties_even` does.
        let v: m256i = convert_to_i32_m256i_from_m256(mul_m256(m256::from(*c), scale));
        let lanes: [i32; 8] = v.into();
        for (q, l) in q.iter_mut().zip(lanes) {
            *q = l as i16;
        }
    }
    let done = chunks.len() * 8;
    for (q, &v) in q[done..].iter_mut().zip(tail) {
        *q = (v * inv).round_ties_even() as i16;
    }
}

/// Portable version of the AVX2 row quantisation (same result).
#[cfg(not(target_feature = "avx2"))]
fn quantize_row(x: &[f32], inv: f32, q: &mut [i16]) {
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * inv).round_ties_even() as i16;
    }
}

/// Exact i32 dot product of two equal-length i16 slices (a multiple of
/// [`STEP`]).
fn dot(a: &[i16], b: &[i16]) -> i32 {
    let mut acc = [[0i32; NR]; MR];
    tile::<1, 1>([a], [b], &mut acc);
    acc[0][0]
}

/// `acc[r][c] = Σ_k a[r][k]·b[c][k]` for an `R × C` register tile.
#[cfg(target_feature = "avx2")]
#[inline(always)]
fn tile<const R: usize, const C: usize>(a: [&[i16]; R], b: [&[i16]; C], acc: &mut [[i32; NR]; MR]) {
    use safe_arch::{add_i32_m256i, m256i, mul_i16_horizontal_add_m256i};
    if R == MR && C == NR {
        let rows: [&[i16]; MR] = std::array::from_fn(|r| a[r]);
        return tile_6x2(rows, b[0], b[1], acc);
    }
    let steps = a[0].len() / STEP;
    let a: [&[[i16; STEP]]; R] = std::array::from_fn(|r| &a[r].as_chunks::<STEP>().0[..steps]);
    let b: [&[[i16; STEP]]; C] = std::array::from_fn(|c| &b[c].as_chunks::<STEP>().0[..steps]);
    let mut sums = [[m256i::default(); C]; R];
    for k in 0..steps {
        for (row, sums) in a.iter().zip(sums.iter_mut()) {
            let x = m256i::from(row[k]);
            for (s, col) in sums.iter_mut().zip(&b) {
                *s = add_i32_m256i(*s, mul_i16_horizontal_add_m256i(x, m256i::from(col[k])));
            }
        }
    }
    for (acc, sums) in acc.iter_mut().zip(&sums) {
        for (acc, s) in acc.iter_mut().zip(sums) {
            *acc = hsum(*s);
        }
    }
}

/// The 6 × 2 tile with its 12 accumulators in named registers: with the
/// 2 weight registers, the row register and the product's temporary it
/// fills the 16 ymm registers exactly (a 4 × 3 tile needs 17, and the
/// compiler spills an accumulator, which chains every step through memory).
#[cfg(target_feature = "avx2")]
#[inline(always)]
fn tile_6x2(a: [&[i16]; MR], b0: &[i16], b1: &[i16], acc: &mut [[i32; NR]; MR]) {
    use safe_arch::{add_i32_m256i as add, m256i, mul_i16_horizontal_add_m256i as madd};
    fn chunks(s: &[i16], steps: usize) -> &[[i16; STEP]] {
        &s.as_chunks::<STEP>().0[..steps]
    }
    let steps = a[0].len() / STEP;
    let (a0, a1, a2) = (
        chunks(a[0], steps),
        chunks(a[1], steps),
        chunks(a[2], steps),
    );
    let (a3, a4, a5) = (
        chunks(a[3], steps),
        chunks(a[4], steps),
        chunks(a[5], steps),
    );
    let (b0, b1) = (chunks(b0, steps), chunks(b1, steps));
    let z = m256i::default;
    let (mut s00, mut s01, mut s10, mut s11) = (z(), z(), z(), z());
    let (mut s20, mut s21, mut s30, mut s31) = (z(), z(), z(), z());
    let (mut s40, mut s41, mut s50, mut s51) = (z(), z(), z(), z());
    for k in 0..steps {
        let (w0, w1) = (m256i::from(b0[k]), m256i::from(b1[k]));
        let x = m256i::from(a0[k]);
        s00 = add(s00, madd(x, w0));
        s01 = add(s01, madd(x, w1));
        let x = m256i::from(a1[k]);
        s10 = add(s10, madd(x, w0));
        s11 = add(s11, madd(x, w1));
        let x = m256i::from(a2[k]);
        s20 = add(s20, madd(x, w0));
        s21 = add(s21, madd(x, w1));
        let x = m256i::from(a3[k]);
        s30 = add(s30, madd(x, w0));
        s31 = add(s31, madd(x, w1));
        let x = m256i::from(a4[k]);
        s40 = add(s40, madd(x, w0));
        s41 = add(s41, madd(x, w1));
        let x = m256i::from(a5[k]);
        s50 = add(s50, madd(x, w0));
        s51 = add(s51, madd(x, w1));
    }
    *acc = [
        [hsum(s00), hsum(s01)],
        [hsum(s10), hsum(s11)],
        [hsum(s20), hsum(s21)],
        [hsum(s30), hsum(s31)],
        [hsum(s40), hsum(s41)],
        [hsum(s50), hsum(s51)],
    ];
}

/// Sum of the 8 i32 lanes.
#[cfg(target_feature = "avx2")]
#[inline(always)]
fn hsum(s: safe_arch::m256i) -> i32 {
    let lanes: [i32; 8] = s.into();
    lanes.iter().sum()
}

/// Portable version of the AVX2 tile (same integer result).
#[cfg(not(target_feature = "avx2"))]
#[inline(always)]
fn tile<const R: usize, const C: usize>(a: [&[i16]; R], b: [&[i16]; C], acc: &mut [[i32; NR]; MR]) {
    for (acc, row) in acc.iter_mut().zip(a) {
        for (acc, col) in acc.iter_mut().zip(b) {
            *acc = row
                .iter()
                .zip(col)
                .map(|(&x, &w)| x as i32 * w as i32)
                .sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn the_integer_product_is_exact() {
        // Against i64 arithmetic on the same quantised values, over shapes
        // that exercise every remainder of the 4 × 3 tile and of k.
        let mut seed = 7;
        for &(rows, n, k) in &[
            (1, 1, 1),
            (5, 7, 17),
            (9, 25, 384),
            (4, 48, 1536),
            (3, 2, 31),
        ] {
            let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
            let x: Vec<f32> = (0..rows * k).map(|_| lcg(&mut seed) * 3.0).collect();
            let layer =
                QuantLinear::quantize(&Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap()).unwrap();
            let (qx, sx) = layer.quantize_rows(&x, rows);
            let got = layer.matmul(&x);
            for r in 0..rows {
                for j in 0..n {
                    let exact: i64 = (0..layer.kp)
                        .map(|c| {
                            qx[r * layer.kp + c] as i64 * layer.weights[j * layer.kp + c] as i64
                        })
                        .sum();
                    let want = exact as f32 * sx[r] * layer.scales[j];
                    assert!(
                        (got[r * n + j] - want).abs() <= 1e-5 * want.abs().max(1.0),
                        "({rows}, {n}, {k}) at [{r}, {j}]: {} vs {want}",
                        got[r * n + j]
                    );
                }
            }
        }
    }

    #[test]
    fn no_partial_sum_can_overflow_at_the_chosen_grid() {
        for k in [16, 384, 1536, 4096] {
            let levels = activation_levels(k) as i64;
            assert!(levels * 127 * k as i64 <= i32::MAX as i64, "k = {k}");
            assert!(levels <= i16::MAX as i64);
        }
        assert_eq!(activation_levels(384), 32_767);
        assert_eq!(activation_levels(1536), 11_008);
    }

    #[test]
    fn the_product_is_close_to_f32() {
        let mut seed = 11;
        let (rows, n, k) = (16, 96, 384);
        let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed) * 0.05).collect();
        let x: Vec<f32> = (0..rows * k).map(|_| lcg(&mut seed)).collect();
        let wt = Tensor::from_vec(w.clone(), (n, k), &Device::Cpu).unwrap();
        let got = QuantLinear::quantize(&wt).unwrap().matmul(&x);
        let mut worst = 0f32;
        for r in 0..rows {
            for j in 0..n {
                let want: f32 = (0..k).map(|c| x[r * k + c] * w[j * k + c]).sum();
                worst = worst.max((got[r * n + j] - want).abs());
            }
        }
        // int8 weights: error ≈ √k · |x| · scale / √12 ≈ 0.006 here.
        assert!(worst < 0.02, "worst absolute error {worst}");
        assert!(worst > 0.0, "the weights were not rounded at all");
    }
}
