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
//! The product is tiled 6 rows × 2 output channels: per step of `k`, 8
//! loads feed 12 multiply-adds into 12 accumulators, which with the 2
//! weight registers, the row register and the product's temporary fill the
//! 16 ymm registers of AVX2. Output channels are split into blocks of 24 (a
//! block's weights, 24 × k i16, stay in L1 for k = 384) that run in
//! parallel.
//!
//! The tile's instructions are chosen at run time ([`crate::simd`]): AVX-512
//! VNNI (`vpdpwssd` on zmm, 32 i16 pairs multiplied and accumulated per
//! instruction), AVX-512BW (`vpmaddwd` + `vpaddd` on zmm), AVX-VNNI
//! (`vpdpwssd` on ymm), AVX2 (`vpmaddwd` + `vpaddd` on ymm) or plain Rust.
//! On the `amx` path the products run on the tile unit instead, in blocks
//! of 16 rows: each i16 activation is split into a signed high byte and an
//! unsigned low byte, the unit multiplies each by the int8 weights
//! (`tdpbssd`, `tdpbusd`: 16,384 multiply-adds per instruction), and
//! `256·high + low` is the same i32 as every other path's.
//! The integer results are the same on every path.

use crate::simd::{self, AMX_COLS, AMX_I8_K, AMX_I8_ROWS, Kernels, MR, NR, STEP};
use candle_core::backend::BackendStorage as _;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Arc;

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
    /// The kernel path of the products.
    kernels: Kernels,
    /// On the `amx` path: the weights in the tile unit's int8 layout
    /// ([`simd::int8_amx_block`]), `k` padded to [`AMX_I8_K`] and `n` to
    /// [`AMX_COLS`] with zeros.
    amx: Option<Arc<AmxWeights>>,
}

/// The int8 weights laid out for [`simd::int8_amx_block`].
#[derive(Debug)]
struct AmxWeights {
    /// `k` rounded up to [`AMX_I8_K`].
    kp: usize,
    /// `n` rounded up to [`AMX_COLS`].
    np: usize,
    /// `np / 16 × kp / 64` tiles of 1,024 bytes.
    tiles: Vec<i8>,
}

impl AmxWeights {
    /// From the `n × kp` weights of a layer (int8 values in i16 lanes).
    fn pack(weights: &[i16], n: usize, kp_in: usize) -> Self {
        let kp = kp_in.div_ceil(AMX_I8_K) * AMX_I8_K;
        let np = n.div_ceil(AMX_COLS) * AMX_COLS;
        let steps = kp / AMX_I8_K;
        let mut tiles = vec![0i8; kp * np];
        for (j, row) in weights.chunks_exact(kp_in).enumerate() {
            let (block, c) = (j / 16, j % 16);
            for (i, &w) in row.iter().enumerate() {
                let (step, r, q) = (i / AMX_I8_K, (i % AMX_I8_K) / 4, i % 4);
                let at = (block * steps + step) * AMX_I8_ROWS * AMX_I8_K + r * AMX_I8_K + c * 4 + q;
                // The values are within ±127 (quantize's clamp).
                tiles[at] = w as i8;
            }
        }
        Self { kp, np, tiles }
    }
}

/// Per-thread buffers of an int8 AMX block.
#[derive(Default)]
struct AmxScratch {
    a_hi: Vec<i8>,
    a_lo: Vec<u8>,
    c_hi: Vec<i32>,
    c_lo: Vec<i32>,
}

thread_local! {
    static AMX_SCRATCH: RefCell<AmxScratch> = RefCell::new(AmxScratch::default());
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
        let kernels = simd::selected().map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        Ok(Self {
            n,
            k,
            kp,
            weights,
            scales,
            levels,
            kernels,
            amx: None,
        }
        .with_kernels(kernels))
    }

    /// The same layer on kernel path `kernels` (the default is
    /// [`simd::selected`]'s).
    pub fn with_kernels(mut self, kernels: Kernels) -> Self {
        self.kernels = kernels;
        self.amx = match (kernels.path(), self.amx.take()) {
            (simd::Path::Amx, Some(packed)) => Some(packed),
            (simd::Path::Amx, None) => {
                Some(Arc::new(AmxWeights::pack(&self.weights, self.n, self.kp)))
            }
            _ => None,
        };
        self
    }

    /// The kernel path of the products.
    pub fn kernels(&self) -> Kernels {
        self.kernels
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
        let kernels = self.kernels;
        q.par_chunks_mut(kp * 64)
            .zip(xs.par_chunks(k * 64))
            .zip(scales.par_chunks_mut(64))
            .for_each(|((q, xs), scales)| {
                for ((q, x), s) in q.chunks_exact_mut(kp).zip(xs.chunks_exact(k)).zip(scales) {
                    let max = x.iter().fold(0f32, |m, &v| m.max(v.abs()));
                    let scale = if max > 0.0 { max / levels } else { 1.0 };
                    simd::quantize_row(kernels, x, 1.0 / scale, q);
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
            .for_each(|((out, qx), sx)| match &self.amx {
                Some(packed) => AMX_SCRATCH.with_borrow_mut(|s| {
                    for ((out, qx), sx) in out
                        .chunks_mut(AMX_I8_ROWS * n)
                        .zip(qx.chunks(AMX_I8_ROWS * kp))
                        .zip(sx.chunks(AMX_I8_ROWS))
                    {
                        self.amx_block(packed, qx, sx, out, s);
                    }
                }),
                None => {
                    for j0 in (0..n).step_by(BLOCK_N) {
                        self.block(qx, sx, j0, (j0 + BLOCK_N).min(n), out);
                    }
                }
            });
    }

    /// Up to [`AMX_I8_ROWS`] rows on the tile unit: the rows split into
    /// high and low bytes in tile order, both products for every output
    /// channel, then `(256·hi + lo) · sx · scale`, the same integers and
    /// the same float operations as [`QuantLinear::block`].
    fn amx_block(
        &self,
        packed: &AmxWeights,
        qx: &[i16],
        sx: &[f32],
        out: &mut [f32],
        s: &mut AmxScratch,
    ) {
        let (n, kp_in) = (self.n, self.kp);
        let (kp, np) = (packed.kp, packed.np);
        // A full block overwrites every byte below; padding (missing rows,
        // `k` short of a whole tile) must be zero.
        let padded = sx.len() < AMX_I8_ROWS || kp_in < kp;
        for_zeroed(&mut s.a_hi, AMX_I8_ROWS * kp, padded);
        for_zeroed(&mut s.a_lo, AMX_I8_ROWS * kp, padded);
        s.c_hi.resize(AMX_I8_ROWS * np, 0);
        s.c_lo.resize(AMX_I8_ROWS * np, 0);
        // Row `r`'s values `64·step..` go to row `r` of tile `step`.
        for (r, x) in qx.chunks_exact(kp_in).enumerate() {
            for (step, x) in x.chunks(AMX_I8_K).enumerate() {
                let at = step * AMX_I8_ROWS * AMX_I8_K + r * AMX_I8_K;
                let len = x.len();
                simd::split_i16(x, &mut s.a_hi[at..at + len], &mut s.a_lo[at..at + len]);
            }
        }
        simd::int8_amx_block(
            self.kernels,
            &s.a_hi,
            &s.a_lo,
            kp,
            &packed.tiles,
            np,
            &mut s.c_hi,
            &mut s.c_lo,
        );
        for (((out, hi), lo), &sx) in out
            .chunks_exact_mut(n)
            .zip(s.c_hi.chunks_exact(np))
            .zip(s.c_lo.chunks_exact(np))
            .zip(sx)
        {
            for (((o, &h), &l), &sw) in out.iter_mut().zip(hi).zip(lo).zip(&self.scales) {
                *o = simd::combine_int8(h, l) as f32 * sx * sw;
            }
        }
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
                    acc = simd::tile(
                        self.kernels,
                        std::array::from_fn(|i| x(r + i)),
                        std::array::from_fn(|c| w(j + c)),
                    );
                } else {
                    for (a, acc) in acc.iter_mut().enumerate().take(mr) {
                        for (c, acc) in acc.iter_mut().enumerate().take(nr) {
                            *acc = simd::dot(self.kernels, x(r + a), w(j + c));
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

/// `buf` at length `len`, all zero if `zero`, else with whatever it held
/// (the caller overwrites all of it): the split rows of an AMX block,
/// which need zeros only where the block is padded.
pub(crate) fn for_zeroed<T: Copy + Default>(buf: &mut Vec<T>, len: usize, zero: bool) {
    if zero {
        buf.clear();
    }
    buf.resize(len, T::default());
}

impl CustomOp1 for QuantLinear {
    fn name(&self) -> &'static str {
        "tomlite-int8-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        linear_fwd("int8 linear", (self.k, self.n), storage, layout, |xs| {
            self.matmul(xs)
        })
    }
}

/// The body of a linear layer's candle op: checks that the input is a
/// contiguous f32 `(rows, k)` matrix (errors name the layer, `what`) and
/// wraps `matmul`'s `rows × n` output.
pub(crate) fn linear_fwd(
    what: &str,
    (k, n): (usize, usize),
    storage: &CpuStorage,
    layout: &Layout,
    matmul: impl FnOnce(&[f32]) -> Vec<f32>,
) -> Result<(CpuStorage, Shape)> {
    let CpuStorage::F32(src) = storage else {
        candle_core::bail!("{what}: f32 input only, got {:?}", storage.dtype())
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: input must be contiguous")
    };
    let (rows, width) = layout.shape().dims2()?;
    if width != k {
        candle_core::bail!("{what}: input width {width}, the layer takes {k}");
    }
    let out = matmul(&src[start..end]);
    Ok((CpuStorage::F32(out), Shape::from_dims(&[rows, n])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    use crate::testing::lcg;

    #[test]
    fn the_integer_product_is_exact() {
        // Against i64 arithmetic on the same quantised values, over shapes
        // that exercise remainders of the 6 × 2 tile and of k.
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

    /// Every path's integer product against the portable one, bit for bit,
    /// over every remainder of the 6 × 2 tile and of the 32-wide step.
    /// Returns `false` (and says so) when the CPU lacks the path.
    fn path_matches_portable(path: simd::Path) -> bool {
        let kernels = match simd::Kernels::force(path) {
            Ok(k) => k,
            Err(_) => {
                eprintln!(
                    "skipped: {path} (CPU lacks {})",
                    path.missing_feature().unwrap_or("?")
                );
                return false;
            }
        };
        let mut seed = 5;
        for k in [1, 2, 15, 16, 17, 31, 32, 33, 64, 384, 1536] {
            for n in 1..=37 {
                let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
                let layer =
                    QuantLinear::quantize(&Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap())
                        .unwrap();
                let (fast, slow) = (
                    layer.clone().with_kernels(kernels),
                    layer.with_kernels(simd::Kernels::portable()),
                );
                // Every row remainder of the 6-row register tile, and of
                // the 16-row tile and 48-row task of the amx path.
                let x: Vec<f32> = (0..70 * k).map(|_| lcg(&mut seed) * 4.0).collect();
                for rows in (1..=13).chain([16, 17, 31, 33, 47, 48, 49, 70]) {
                    let x = &x[..rows * k];
                    assert_eq!(
                        fast.quantize_rows(x, rows),
                        slow.quantize_rows(x, rows),
                        "{path}: quantised rows differ, rows {rows} n {n} k {k}"
                    );
                    let (a, b) = (fast.matmul(x), slow.matmul(x));
                    let same = a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{path}: product differs, rows {rows} n {n} k {k}");
                }
            }
        }
        true
    }

    #[test]
    fn int8_path_amx_is_bit_exact_to_portable_or_skipped() {
        path_matches_portable(simd::Path::Amx);
    }

    #[test]
    fn int8_path_avx512vnni_is_bit_exact_to_portable_or_skipped() {
        path_matches_portable(simd::Path::Avx512Vnni);
    }

    #[test]
    fn int8_path_avx512_is_bit_exact_to_portable_or_skipped() {
        path_matches_portable(simd::Path::Avx512);
    }

    #[test]
    fn int8_path_avxvnni_is_bit_exact_to_portable_or_skipped() {
        path_matches_portable(simd::Path::AvxVnni);
    }

    #[test]
    fn int8_path_avx2_is_bit_exact_to_portable_or_skipped() {
        path_matches_portable(simd::Path::Avx2);
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
#[cfg(test)]
mod timing {
    use super::*;
    use candle_core::Device;

    /// GFLOP/s of the FFN-up shape (640 × 384 → 1,536) on every kernel path
    /// this CPU has: `cargo test -p tomlite-models --lib --release
    /// int8_speed_per_kernel_path -- --ignored --nocapture`. A measurement,
    /// not a check.
    #[test]
    #[ignore]
    fn int8_speed_per_kernel_path() {
        let (rows, n, k) = (640, 1536, 384);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919) % 255) as f32 - 127.0)
            .collect();
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 31) % 200) as f32 - 100.0)
            .collect();
        let layer =
            QuantLinear::quantize(&Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap()).unwrap();
        for p in simd::PATHS {
            let Ok(kk) = simd::Kernels::force(p) else {
                continue;
            };
            let l = layer.clone().with_kernels(kk);
            let _ = l.matmul(&x);
            let t = std::time::Instant::now();
            for _ in 0..10 {
                let _ = l.matmul(&x);
            }
            let s = t.elapsed().as_secs_f64() / 10.0;
            let (qx, sx) = l.quantize_rows(&x, rows);
            let t = std::time::Instant::now();
            for _ in 0..10 {
                let mut out = vec![0f32; rows * n];
                l.product(&qx, &sx, rows, &mut out);
            }
            let s2 = t.elapsed().as_secs_f64() / 10.0;
            eprintln!(
                "{p}: {:.1} GFLOP/s whole, {:.1} product only",
                2.0 * (rows * n * k) as f64 / s / 1e9,
                2.0 * (rows * n * k) as f64 / s2 / 1e9
            );
        }
    }
}
