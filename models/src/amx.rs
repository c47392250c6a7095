//! f32 linear layers on the AMX tile unit (the `amx` kernel path of
//! [`crate::simd`]).
//!
//! The tile unit multiplies bf16 (8 bits of mantissa), not f32. A bf16
//! product alone would cost the encoder accuracy like int8 does, so each
//! operand is split into a bf16 head and a bf16 remainder ([`simd::split_bf16`])
//! and the product is the sum of three bf16 products, `xₕ·wₕ + xₕ·wₗ +
//! xₗ·wₕ`, accumulated in f32 by the unit: about 16 bits of each operand,
//! a relative error near 2⁻¹⁷ of the product (f32 itself: 2⁻²⁴; int8
//! weights: 2⁻⁸). The weights are split and laid out in the unit's tile
//! order once, at load ([`Bf16x3Linear::pack`]); each input row is split
//! per call, inside the parallel task that uses it.
//!
//! Work is split into blocks of [`simd::AMX_ROWS`] rows, one parallel task
//! each; a block runs every output column ([`simd::bf16x3_block`]).

use crate::simd::{self, AMX_COLS, AMX_K, AMX_ROWS, AMX_TILE, Kernels, Path};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Arc;

/// A linear layer `y = x·Wᵀ` whose product runs on the tile unit.
#[derive(Debug, Clone)]
pub struct Bf16x3Linear {
    /// Output channels.
    n: usize,
    /// Input width.
    k: usize,
    /// `k` rounded up to [`AMX_K`].
    kp: usize,
    /// `n` rounded up to [`AMX_COLS`].
    np: usize,
    /// The weights' bf16 heads and remainders in tile order: for each
    /// block of 16 output channels, for each 32 of `k`, one tile of
    /// [`AMX_TILE`] values (row `r`, column `c`, pair `p` holds
    /// `W[16·block + c][32·step + 2r + p]`); zero-padded.
    hi: Arc<Vec<u16>>,
    lo: Arc<Vec<u16>>,
    /// The `amx` path.
    kernels: Kernels,
}

/// Per-thread buffers of a block: the split rows and the padded output.
struct Scratch {
    a_hi: Vec<u16>,
    a_lo: Vec<u16>,
    out: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { a_hi: Vec::new(), a_lo: Vec::new(), out: Vec::new() })
    };
}

impl Bf16x3Linear {
    /// Packs a `(out, in)` f32 weight (Hugging Face's `Linear.weight`
    /// layout) for kernel path `kernels`, which must be `amx`.
    pub fn pack(weight: &Tensor, kernels: Kernels) -> Result<Self> {
        if kernels.path() != Path::Amx {
            candle_core::bail!(
                "the bf16x3 layer needs the amx kernel path, not {}",
                kernels.path()
            );
        }
        let (n, k) = weight.dims2()?;
        let w = weight
            .to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        Ok(Self::pack_slice(&w, n, k, kernels))
    }

    /// [`Bf16x3Linear::pack`] on a row-major `n × k` slice.
    fn pack_slice(w: &[f32], n: usize, k: usize, kernels: Kernels) -> Self {
        let kp = k.div_ceil(AMX_K).max(1) * AMX_K;
        let np = n.div_ceil(AMX_COLS).max(1) * AMX_COLS;
        let steps = kp / AMX_K;
        // Split once, row-major; then place each value in its tile.
        let (mut h, mut l) = (vec![0u16; n * k], vec![0u16; n * k]);
        simd::split_bf16(&w[..n * k], &mut h, &mut l);
        let mut hi = vec![0u16; kp * np];
        let mut lo = vec![0u16; kp * np];
        for j in 0..n {
            let (block, c) = (j / 16, j % 16);
            for i in 0..k {
                let (step, r, p) = (i / AMX_K, (i % AMX_K) / 2, i % 2);
                let at = (block * steps + step) * AMX_TILE + r * AMX_K + 2 * c + p;
                hi[at] = h[j * k + i];
                lo[at] = l[j * k + i];
            }
        }
        Self {
            n,
            k,
            kp,
            np,
            hi: Arc::new(hi),
            lo: Arc::new(lo),
            kernels,
        }
    }

    /// Output channels.
    pub fn out_features(&self) -> usize {
        self.n
    }

    /// Input width.
    pub fn in_features(&self) -> usize {
        self.k
    }

    /// `xs`: `(rows, in)` f32 → `(rows, out)` f32, `xs·Wᵀ`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        xs.contiguous()?.apply_op1_no_bwd(self)
    }

    /// The product on plain slices: `xs` is `rows × in`, row-major.
    pub fn matmul(&self, xs: &[f32]) -> Vec<f32> {
        let (n, k) = (self.n, self.k);
        let mut out = vec![0f32; xs.len() / k.max(1) * n];
        if out.is_empty() {
            return out;
        }
        out.par_chunks_mut(AMX_ROWS * n)
            .zip(xs.par_chunks(AMX_ROWS * k))
            .for_each(|(out, xs)| {
                SCRATCH.with_borrow_mut(|s| self.block(xs, out, s));
            });
        out
    }

    /// One block of up to [`AMX_ROWS`] rows.
    fn block(&self, xs: &[f32], out: &mut [f32], s: &mut Scratch) {
        let (n, k, kp, np) = (self.n, self.k, self.kp, self.np);
        let rows = xs.len() / k;
        // A full block overwrites every value below; padding (missing
        // rows, `k` short of a whole tile) must be zero.
        let padded = rows < AMX_ROWS || k < kp;
        crate::quant::for_zeroed(&mut s.a_hi, AMX_ROWS * kp, padded);
        crate::quant::for_zeroed(&mut s.a_lo, AMX_ROWS * kp, padded);
        // Row `r`'s values `32·step..` go to row `r % 16` of tile
        // `(r / 16, step)` (the layout `simd::bf16x3_block` reads).
        let steps = kp / AMX_K;
        for (r, x) in xs.chunks_exact(k).enumerate() {
            for (step, x) in x.chunks(AMX_K).enumerate() {
                let at = ((r / 16) * steps + step) * AMX_TILE + (r % 16) * AMX_K;
                let len = x.len();
                simd::split_bf16(x, &mut s.a_hi[at..at + len], &mut s.a_lo[at..at + len]);
            }
        }
        // A whole block with no padded columns is written in place; else
        // into the padded scratch, then copied.
        let direct = rows == AMX_ROWS && np == n;
        if !direct {
            s.out.resize(AMX_ROWS * np, 0.0);
        }
        simd::bf16x3_block(
            self.kernels,
            &s.a_hi,
            &s.a_lo,
            kp,
            &self.hi,
            &self.lo,
            np,
            if direct { &mut *out } else { &mut s.out },
        );
        if direct {
            return;
        }
        for (o, padded) in out.chunks_exact_mut(n).zip(s.out.chunks_exact(np)) {
            o.copy_from_slice(&padded[..n]);
        }
    }
}

impl CustomOp1 for Bf16x3Linear {
    fn name(&self) -> &'static str {
        "tomlite-bf16x3-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        crate::quant::linear_fwd("bf16x3 linear", (self.k, self.n), storage, layout, |xs| {
            self.matmul(xs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::lcg;

    /// The `amx` path's kernels, or `None` with a "skipped" line.
    fn amx_or_skip(test: &str) -> Option<Kernels> {
        match Kernels::force(Path::Amx) {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("skipped: {test} ({e})");
                None
            }
        }
    }

    #[test]
    fn split_bf16_keeps_sixteen_bits() {
        let mut seed = 7;
        let x: Vec<f32> = (0..4096).map(|_| lcg(&mut seed) * 100.0).collect();
        let (mut h, mut l) = (vec![0; x.len()], vec![0; x.len()]);
        simd::split_bf16(&x, &mut h, &mut l);
        for ((&v, &h), &l) in x.iter().zip(&h).zip(&l) {
            let back = f32::from_bits(u32::from(h) << 16) + f32::from_bits(u32::from(l) << 16);
            assert!((back - v).abs() <= v.abs() * 2f32.powi(-16), "{v} → {back}");
        }
        // Exactly representable values have no remainder.
        simd::split_bf16(&[1.0, -2.5, 0.0], &mut h[..3], &mut l[..3]);
        assert_eq!(&h[..3], &[0x3f80, 0xc020, 0]);
        assert_eq!(&l[..3], &[0, 0, 0]);
    }

    #[test]
    fn pack_refuses_another_path() {
        let w = Tensor::zeros((4, 8), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let err = Bf16x3Linear::pack(&w, Kernels::portable()).unwrap_err();
        assert!(err.to_string().contains("amx"), "{err}");
    }

    /// Every shape remainder (rows around the 32-row block, outputs around
    /// the 32-column block, inputs around the 32-wide step) against an f64
    /// product: within 2⁻¹⁵ of Σ|x·w| (bf16 × 3 keeps ≈ 2⁻¹⁷).
    #[test]
    fn bf16x3_path_is_close_to_f64_over_all_remainders_or_skipped() {
        let Some(kernels) = amx_or_skip("bf16x3 product") else {
            return;
        };
        let mut seed = 11;
        for rows in [1, 15, 16, 17, 31, 32, 33, 64, 70] {
            for n in [1, 15, 16, 17, 31, 32, 33, 48, 64, 100] {
                for k in [1, 2, 31, 32, 33, 64, 100, 384] {
                    let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
                    let x: Vec<f32> = (0..rows * k).map(|_| lcg(&mut seed) * 4.0).collect();
                    let layer = Bf16x3Linear::pack_slice(&w, n, k, kernels);
                    let got = layer.matmul(&x);
                    assert_eq!(got.len(), rows * n);
                    for r in 0..rows {
                        for j in 0..n {
                            let (mut want, mut mag) = (0f64, 0f64);
                            for i in 0..k {
                                let p = x[r * k + i] as f64 * w[j * k + i] as f64;
                                want += p;
                                mag += p.abs();
                            }
                            let err = (got[r * n + j] as f64 - want).abs();
                            assert!(
                                err <= mag * 2f64.powi(-15) + 1e-30,
                                "rows {rows} n {n} k {k} at ({r}, {j}): {} vs {want} (Σ|p| {mag})",
                                got[r * n + j]
                            );
                        }
                    }
                }
            }
        }
    }

    /// The candle op gives what the slice product gives, for a 3-D input
    /// flattened by the caller and for a non-contiguous one.
    #[test]
    fn the_tensor_op_matches_the_slice_product_or_skipped() {
        let Some(kernels) = amx_or_skip("bf16x3 tensor op") else {
            return;
        };
        let dev = candle_core::Device::Cpu;
        let mut seed = 3;
        let w: Vec<f32> = (0..40 * 24).map(|_| lcg(&mut seed)).collect();
        let x: Vec<f32> = (0..24 * 37).map(|_| lcg(&mut seed)).collect();
        let wt = Tensor::from_vec(w.clone(), (40, 24), &dev).unwrap();
        let layer = Bf16x3Linear::pack(&wt, kernels).unwrap();
        // (24, 37) transposed: a non-contiguous (37, 24) input.
        let xt = Tensor::from_vec(x, (24, 37), &dev).unwrap().t().unwrap();
        let got = layer.forward(&xt).unwrap().to_vec2::<f32>().unwrap();
        let flat = xt
            .contiguous()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let want = layer.matmul(&flat);
        assert_eq!(got.concat(), want);
        let wrong = Tensor::zeros((3, 23), candle_core::DType::F32, &dev).unwrap();
        assert!(
            layer
                .forward(&wrong)
                .unwrap_err()
                .to_string()
                .contains("input width 23")
        );
    }

    /// GFLOP/s of the encoder's four product shapes (640 rows) on the tile
    /// unit against `gemm` in f32, same process, alternating: `cargo test
    /// -p tomlite-models --lib --release amx_speed -- --ignored
    /// --nocapture`. Also the kernel alone on one core (one block, no
    /// split of the rows). A measurement, not a check.
    #[test]
    #[ignore]
    fn amx_speed() {
        let Some(kernels) = amx_or_skip("amx speed") else {
            return;
        };
        let dev = candle_core::Device::Cpu;
        let rows = 640;
        for (name, k, n) in [
            ("QKV", 384, 1152),
            ("attention output", 384, 384),
            ("FFN up", 384, 1536),
            ("FFN down", 1536, 384),
        ] {
            let mut seed = 5;
            let w: Vec<f32> = (0..n * k).map(|_| lcg(&mut seed)).collect();
            let x: Vec<f32> = (0..rows * k).map(|_| lcg(&mut seed)).collect();
            let layer = Bf16x3Linear::pack_slice(&w, n, k, kernels);
            let wt = Tensor::from_vec(w, (n, k), &dev).unwrap().t().unwrap();
            let xt = Tensor::from_vec(x.clone(), (rows, k), &dev).unwrap();
            let flop = 2.0 * (rows * n * k) as f64;
            let time = |f: &mut dyn FnMut()| {
                f();
                let t = std::time::Instant::now();
                for _ in 0..20 {
                    f();
                }
                flop / (t.elapsed().as_secs_f64() / 20.0) / 1e9
            };
            let (mut amx, mut gemm) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                amx.push(time(&mut || drop(layer.matmul(&x))));
                gemm.push(time(&mut || drop(xt.matmul(&wt).unwrap())));
            }
            let mut s = Scratch {
                a_hi: Vec::new(),
                a_lo: Vec::new(),
                out: Vec::new(),
            };
            let mut out = vec![0f32; AMX_ROWS * n];
            let one = time(&mut || {
                for _ in 0..rows / AMX_ROWS {
                    layer.block(&x[..AMX_ROWS * k], &mut out, &mut s);
                }
            });
            let (mut amx2, mut gemm2) = (amx.clone(), gemm.clone());
            amx2.sort_by(f64::total_cmp);
            gemm2.sort_by(f64::total_cmp);
            eprintln!(
                "{name} ({rows} × {k} → {n}): amx {:.0} GFLOP/s, gemm {:.0} (medians of 3, 2 threads); amx on one core {one:.0}",
                amx2[1], gemm2[1]
            );
        }
    }
}
