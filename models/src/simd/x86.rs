//! The x86 kernels: dot products, 6 × 2 tiles and row quantization for
//! each instruction set the dispatch ([`super::Kernels`]) can pick, and the
//! AMX blocks.

#[cfg(target_arch = "x86")]
use std::arch::x86::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR, portable_quantize};

/// Defines a dot product and a 6 × 2 tile over `$w` i16 per step for
/// one instruction set: `$load` reads a `[i16; $w]`, `$madd(acc, x, y)`
/// adds the pairwise products of `x` and `y` into `acc`, `$hsum` sums
/// an accumulator's lanes and `$sum6` the lanes of six at once (a
/// reduction per accumulator cost about as much as a pass's products
/// at k = 384). The tile runs as two passes of 3 rows (6
/// accumulators, 2 weight registers, a row register and a temporary
/// leave the compiler room in 16 ymm registers; 6 rows at once needed
/// all 16 and it spilled accumulators).
macro_rules! int8_kernels {
    ($dot:ident, $tile:ident, $pass:ident, $feat:literal, $w:literal, $zero:expr,
     $load:ident, $madd:ident, $hsum:ident, $sum6:ident) => {
        /// Callers must know that the CPU has the features of the
        /// `target_feature` attribute.
        #[target_feature(enable = $feat)]
        pub(super) fn $dot(a: &[i16], b: &[i16]) -> i32 {
            let (a, _) = a.as_chunks::<$w>();
            let (b, _) = b.as_chunks::<$w>();
            let mut s = $zero;
            for (x, y) in a.iter().zip(b) {
                s = $madd(s, $load(x), $load(y));
            }
            $hsum(s)
        }

        /// As the dot product, for a tile (eight slices of one length).
        #[target_feature(enable = $feat)]
        pub(super) fn $tile(a: [&[i16]; MR], b: [&[i16]; NR]) -> [[i32; NR]; MR] {
            let top = $pass(a[0], a[1], a[2], b[0], b[1]);
            let bottom = $pass(a[3], a[4], a[5], b[0], b[1]);
            [top[0], top[1], top[2], bottom[0], bottom[1], bottom[2]]
        }

        /// Three rows of the tile. Zipped iterators and named
        /// accumulators: arrays of rows or of accumulators, or an index
        /// per load, made the compiler keep them in memory and check
        /// bounds inside the loop.
        #[inline]
        #[target_feature(enable = $feat)]
        fn $pass(a0: &[i16], a1: &[i16], a2: &[i16], b0: &[i16], b1: &[i16]) -> [[i32; NR]; 3] {
            fn ch(s: &[i16]) -> &[[i16; $w]] {
                s.as_chunks::<$w>().0
            }
            let (a0, a1, a2, b0, b1) = (ch(a0), ch(a1), ch(a2), ch(b0), ch(b1));
            let z = $zero;
            let (mut s00, mut s01, mut s10, mut s11, mut s20, mut s21) = (z, z, z, z, z, z);
            for ((((x0, x1), x2), y0), y1) in a0.iter().zip(a1).zip(a2).zip(b0).zip(b1) {
                let (w0, w1) = ($load(y0), $load(y1));
                let x = $load(x0);
                s00 = $madd(s00, x, w0);
                s01 = $madd(s01, x, w1);
                let x = $load(x1);
                s10 = $madd(s10, x, w0);
                s11 = $madd(s11, x, w1);
                let x = $load(x2);
                s20 = $madd(s20, x, w0);
                s21 = $madd(s21, x, w1);
            }
            let r = $sum6([s00, s01, s10, s11, s20, s21]);
            [[r[0], r[1]], [r[2], r[3]], [r[4], r[5]]]
        }
    };
}

#[inline]
#[target_feature(enable = "avx2")]
fn load256(x: &[i16; 16]) -> __m256i {
    // SAFETY: a by-value reinterpretation of 32 bytes as 32 bytes (any
    // bit pattern is a valid __m256i); no pointer is involved, so the
    // compiler emits one unaligned load and no checks.
    unsafe { std::mem::transmute::<[i16; 16], __m256i>(*x) }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn load512(x: &[i16; 32]) -> __m512i {
    // SAFETY: a by-value reinterpretation of 64 bytes as 64 bytes (any
    // bit pattern is a valid __m512i); no pointer is involved.
    unsafe { std::mem::transmute::<[i16; 32], __m512i>(*x) }
}

#[inline]
#[target_feature(enable = "avx2")]
fn madd_avx2(s: __m256i, x: __m256i, y: __m256i) -> __m256i {
    _mm256_add_epi32(s, _mm256_madd_epi16(x, y))
}

#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn madd_avxvnni(s: __m256i, x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpwssd_avx_epi32(s, x, y)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn madd_avx512(s: __m512i, x: __m512i, y: __m512i) -> __m512i {
    _mm512_add_epi32(s, _mm512_madd_epi16(x, y))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn madd_avx512vnni(s: __m512i, x: __m512i, y: __m512i) -> __m512i {
    _mm512_dpwssd_epi32(s, x, y)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum256(s: __m256i) -> i32 {
    let v = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01_00_11_10>(v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b10_11_00_01>(v));
    _mm_cvtsi128_si32(v)
}

/// The lane sums of six accumulators: `vphaddd` pairs them up, so the
/// six reductions share 8 instructions instead of 6 × 7.
#[inline]
#[target_feature(enable = "avx2")]
fn sum6_256(v: [__m256i; 6]) -> [i32; 6] {
    // h01 = [v0 01, v0 23, v1 01, v1 23 | v0 45, v0 67, v1 45, v1 67], …
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    // [Σv0 0-3, Σv1 0-3, Σv2 0-3, Σv3 0-3 | the same over lanes 4-7]
    let q0 = _mm256_hadd_epi32(h01, h23);
    let q1 = _mm256_hadd_epi32(h45, h45);
    let fold =
        |q: __m256i| _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
    let (lo, hi) = (fold(q0), fold(q1));
    [
        _mm_cvtsi128_si32(lo),
        _mm_extract_epi32::<1>(lo),
        _mm_extract_epi32::<2>(lo),
        _mm_extract_epi32::<3>(lo),
        _mm_cvtsi128_si32(hi),
        _mm_extract_epi32::<1>(hi),
    ]
}

/// [`sum6_256`] for zmm accumulators: each folded to 8 lanes first.
#[inline]
#[target_feature(enable = "avx512f")]
fn sum6_512(v: [__m512i; 6]) -> [i32; 6] {
    sum6_256(
        v.map(|v| _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))),
    )
}

#[inline]
#[target_feature(enable = "avx512f")]
fn hsum512(s: __m512i) -> i32 {
    _mm512_reduce_add_epi32(s)
}

int8_kernels!(
    dot_avx2,
    tile_avx2,
    pass_avx2,
    "avx2,fma",
    16,
    _mm256_setzero_si256(),
    load256,
    madd_avx2,
    hsum256,
    sum6_256
);
int8_kernels!(
    dot_avxvnni,
    tile_avxvnni,
    pass_avxvnni,
    "avx2,avxvnni",
    16,
    _mm256_setzero_si256(),
    load256,
    madd_avxvnni,
    hsum256,
    sum6_256
);
int8_kernels!(
    dot_avx512,
    tile_avx512,
    pass_avx512,
    "avx512f,avx512bw",
    32,
    _mm512_setzero_si512(),
    load512,
    madd_avx512,
    hsum512,
    sum6_512
);
int8_kernels!(
    dot_avx512vnni,
    tile_avx512vnni,
    pass_avx512vnni,
    "avx512f,avx512bw,avx512vnni",
    32,
    _mm512_setzero_si512(),
    load512,
    madd_avx512vnni,
    hsum512,
    sum6_512
);

/// The tile configuration: palette 1, tiles 0–7 each 16 rows of 64
/// bytes (`ldtilecfg`'s 64-byte layout: palette, start row, 14
/// reserved bytes, 16 column widths in bytes as u16, 16 row counts).
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

/// A `static`, so `ldtilecfg` reads one fixed, 64-byte-aligned place.
#[cfg(target_arch = "x86_64")]
static TILES: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    TileConfig(c)
};

/// [`super::bf16x3_block`] on the tile unit. Tiles 0–3 accumulate the
/// 32 × 32 output block (rows 0–15 and 16–31 × columns 0–15 and
/// 16–31), 4–5 hold the two row tiles of the left operand, 6–7 the two
/// column tiles of the right one. Per 32 of `k`: `aₗ·bₕ`, then `aₕ·bₕ`
/// (reusing `bₕ`), then `aₕ·bₗ` (reusing `aₕ`): 8 tile loads for 12
/// products.
///
/// Callers must know that the CPU has AMX-TILE and AMX-BF16 and that
/// the OS granted the tile state, and must have checked the lengths as
/// `bf16x3_block` does.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn bf16x3_block(
    a_hi: &[u16],
    a_lo: &[u16],
    kp: usize,
    b_hi: &[u16],
    b_lo: &[u16],
    np: usize,
    out: &mut [f32],
) {
    use std::arch::asm;
    let steps = kp / super::AMX_K;
    // Both operands are in contiguous tiles of 16 rows of 64 bytes.
    let stride_a = 64usize;
    let stride_b = 64usize;
    let stride_c = np * 4;
    // The left operand's tile of rows `row..row + 16` and `k` from
    // `32·step`. Slicing proves every byte `tileloadd` reads is inside
    // the operand.
    let a_tile = |a: &[u16], row: usize, step: usize| {
        let at = ((row / 16) * steps + step) * super::AMX_TILE;
        a[at..at + super::AMX_TILE].as_ptr()
    };
    let b_tile = |b: &[u16], col_block: usize, step: usize| {
        let at = (col_block * steps + step) * super::AMX_TILE;
        b[at..at + super::AMX_TILE].as_ptr()
    };
    // SAFETY: the caller vouches for the CPU and the OS.
    unsafe { configure_tiles() };
    for jb in (0..np / 16).step_by(2) {
        // SAFETY: the tiles are configured.
        unsafe { zero_accumulators() };
        for step in 0..steps {
            // SAFETY: each pointer starts a slice that covers the 16
            // rows the load reads at its stride (the closures slice
            // them); the tiles are configured.
            unsafe {
                asm!(
                    "tileloadd tmm4, [{al0} + {sa}*1]",
                    "tileloadd tmm5, [{al1} + {sa}*1]",
                    "tileloadd tmm6, [{bh0} + {sb}*1]",
                    "tileloadd tmm7, [{bh1} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "tileloadd tmm4, [{ah0} + {sa}*1]",
                    "tileloadd tmm5, [{ah1} + {sa}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "tileloadd tmm6, [{bl0} + {sb}*1]",
                    "tileloadd tmm7, [{bl1} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    al0 = in(reg) a_tile(a_lo, 0, step),
                    al1 = in(reg) a_tile(a_lo, 16, step),
                    ah0 = in(reg) a_tile(a_hi, 0, step),
                    ah1 = in(reg) a_tile(a_hi, 16, step),
                    bh0 = in(reg) b_tile(b_hi, jb, step),
                    bh1 = in(reg) b_tile(b_hi, jb + 1, step),
                    bl0 = in(reg) b_tile(b_lo, jb, step),
                    bl1 = in(reg) b_tile(b_lo, jb + 1, step),
                    sa = in(reg) stride_a,
                    sb = in(reg) stride_b,
                    options(nostack, readonly)
                )
            };
        }
        let mut c = |row: usize, col: usize| {
            let at = row * np + col;
            out[at..at + 15 * np + 16].as_mut_ptr()
        };
        let targets = [
            c(0, jb * 16),
            c(0, jb * 16 + 16),
            c(16, jb * 16),
            c(16, jb * 16 + 16),
        ];
        // SAFETY: each pointer starts a slice of `out` that covers the
        // 16 rows of 16 f32 the store writes at its stride; the tiles
        // are configured.
        unsafe { store_accumulators(targets.map(|p| p.cast()), stride_c) };
    }
    // SAFETY: the tiles were configured above.
    unsafe { release_tiles() };
}

/// [`super::int8_amx_block`] on the tile unit. Tiles 0–1 accumulate
/// the high bytes' products for output columns 0–15 and 16–31, 2–3
/// the low bytes'; 4 and 5 hold the row tile's high and low bytes, 6
/// and 7 the two column tiles of weights. Per 64 of `k`: 4 loads, 4
/// products of 16 × 16 × 64.
///
/// Callers must know that the CPU has AMX-TILE and AMX-INT8 and that
/// the OS granted the tile state, and must have checked the lengths as
/// `int8_amx_block` does.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn int8_amx_block(
    a_hi: &[i8],
    a_lo: &[u8],
    kp: usize,
    b: &[i8],
    np: usize,
    c_hi: &mut [i32],
    c_lo: &mut [i32],
) {
    use std::arch::asm;
    const TILE: usize = 16 * super::AMX_I8_K;
    let steps = kp / super::AMX_I8_K;
    let stride = 64usize;
    let stride_c = np * 4;
    // Slicing proves every byte `tileloadd` reads is inside the
    // operand.
    let a_tile = |step: usize| {
        let at = step * TILE;
        (a_hi[at..at + TILE].as_ptr(), a_lo[at..at + TILE].as_ptr())
    };
    let b_tile = |col_block: usize, step: usize| {
        let at = (col_block * steps + step) * TILE;
        b[at..at + TILE].as_ptr()
    };
    // SAFETY: the caller vouches for the CPU and the OS.
    unsafe { configure_tiles() };
    for jb in (0..np / 16).step_by(2) {
        // SAFETY: the tiles are configured.
        unsafe { zero_accumulators() };
        for step in 0..steps {
            let (hi, lo) = a_tile(step);
            // SAFETY: each pointer starts a slice that covers the 16
            // rows of 64 bytes the load reads; the tiles are
            // configured.
            unsafe {
                asm!(
                    "tileloadd tmm6, [{b0} + {s}*1]",
                    "tileloadd tmm7, [{b1} + {s}*1]",
                    "tileloadd tmm4, [{hi} + {s}*1]",
                    "tdpbssd tmm0, tmm4, tmm6",
                    "tdpbssd tmm1, tmm4, tmm7",
                    "tileloadd tmm5, [{lo} + {s}*1]",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    hi = in(reg) hi,
                    lo = in(reg) lo,
                    b0 = in(reg) b_tile(jb, step),
                    b1 = in(reg) b_tile(jb + 1, step),
                    s = in(reg) stride,
                    options(nostack, readonly)
                )
            };
        }
        let c = |c: &mut [i32], col: usize| c[col..col + 15 * np + 16].as_mut_ptr();
        let targets = [
            c(c_hi, jb * 16),
            c(c_hi, jb * 16 + 16),
            c(c_lo, jb * 16),
            c(c_lo, jb * 16 + 16),
        ];
        // SAFETY: each pointer starts a slice of its output that
        // covers the 16 rows of 16 i32 the store writes at its stride;
        // the tiles are configured.
        unsafe { store_accumulators(targets.map(|p| p.cast()), stride_c) };
    }
    // SAFETY: the tiles were configured above.
    unsafe { release_tiles() };
}

/// Loads [`TILES`]. Callers must know that the CPU has AMX-TILE and
/// that the OS granted the tile state.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn configure_tiles() {
    // SAFETY: `TILES` is a valid palette-1 configuration, 64 readable
    // bytes; the caller vouches for the CPU and the OS.
    unsafe { std::arch::asm!("ldtilecfg [{0}]", in(reg) TILES.0.as_ptr(), options(nostack)) };
}

/// Zeroes the accumulator tiles 0–3. Callers must have configured the
/// tiles.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn zero_accumulators() {
    // SAFETY: tile instructions on configured tiles; no memory.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
}

/// Stores tiles 0–3 (16 rows of 64 bytes each) to `targets`, rows
/// `stride` bytes apart. Callers must have configured the tiles and
/// must know that each target starts 15·`stride` + 64 writable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store_accumulators(targets: [*mut u8; 4], stride: usize) {
    // SAFETY: the caller vouches for the targets and the tiles.
    unsafe {
        std::arch::asm!(
            "tilestored [{t0} + {s}*1], tmm0",
            "tilestored [{t1} + {s}*1], tmm1",
            "tilestored [{t2} + {s}*1], tmm2",
            "tilestored [{t3} + {s}*1], tmm3",
            t0 = in(reg) targets[0],
            t1 = in(reg) targets[1],
            t2 = in(reg) targets[2],
            t3 = in(reg) targets[3],
            s = in(reg) stride,
            options(nostack)
        )
    };
}

/// Releases this thread's tile state (the next block configures it
/// again). Callers must have configured the tiles.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn release_tiles() {
    // SAFETY: tile state only; no memory.
    unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
}

/// Runs `f` inside a function compiled for AVX-512F/BW (see
/// [`super::wide`]). Callers must know that the CPU has them.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Callers must know that the CPU has AVX2. `q` as long as `x`.
#[target_feature(enable = "avx2")]
pub(super) fn quantize_avx2(x: &[f32], inv: f32, q: &mut [i16]) {
    let (xc, xt) = x.as_chunks::<16>();
    let (qc, qt) = q.as_chunks_mut::<16>();
    let scale = _mm256_set1_ps(inv);
    for (x, q) in xc.iter().zip(qc.iter_mut()) {
        // SAFETY: each half of `x` is 8 readable f32.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_ps(x.as_ptr()),
                _mm256_loadu_ps(x[8..].as_ptr()),
            )
        };
        // vcvtps2dq rounds to nearest even, as `round_ties_even` does.
        let lo = _mm256_cvtps_epi32(_mm256_mul_ps(lo, scale));
        let hi = _mm256_cvtps_epi32(_mm256_mul_ps(hi, scale));
        // packs works per 128-bit lane: [lo0-3 hi0-3 lo4-7 hi4-7];
        // the permutation puts the quarters back in order.
        let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
        // SAFETY: `q` is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), packed) };
    }
    portable_quantize(xt, inv, qt);
}

/// Callers must know that the CPU has AVX-512F. `q` as long as `x`.
#[target_feature(enable = "avx512f")]
pub(super) fn quantize_avx512(x: &[f32], inv: f32, q: &mut [i16]) {
    let (xc, xt) = x.as_chunks::<16>();
    let (qc, qt) = q.as_chunks_mut::<16>();
    let scale = _mm512_set1_ps(inv);
    for (x, q) in xc.iter().zip(qc.iter_mut()) {
        // SAFETY: `x` is 16 readable f32.
        let v = unsafe { _mm512_loadu_ps(x.as_ptr()) };
        // vcvtps2dq rounds to nearest even; vpmovdw keeps the low 16
        // bits (the values are within ±32,767).
        let v = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v, scale)));
        // SAFETY: `q` is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), v) };
    }
    portable_quantize(xt, inv, qt);
}
