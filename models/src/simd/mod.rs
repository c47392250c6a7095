//! The CPU kernels that need instructions beyond the x86-64 baseline, and
//! the one place where the path among them is chosen: at run time, from
//! what the CPU has, once per process.
//!
//! # Paths
//!
//! | path | int8 product (i16 · i16 → i32) | f32 product | needs |
//! |---|---|---|---|
//! | `amx` | AMX tiles, two int8 products ([`int8_amx_block`]) | AMX tiles, bf16 × 3 ([`bf16x3_block`]) | AMX-TILE, -BF16, -INT8, the OS's permission, and `avx512vnni`'s |
//! | `avx512vnni` | `vpdpwssd` on zmm: 32 multiply-adds, accumulated, per instruction | `gemm` | AVX-512F, BW, VNNI |
//! | `avx512` | `vpmaddwd` + `vpaddd` on zmm | `gemm` | AVX-512F, BW |
//! | `avxvnni` | `vpdpwssd` on ymm (the VEX form) | `gemm` | AVX2, AVX-VNNI |
//! | `avx2` | `vpmaddwd` + `vpaddd` on ymm | `gemm` | AVX2, FMA |
//! | `portable` | plain Rust | `gemm` | nothing |
//!
//! [`Kernels::detect`] takes the first path of the table the CPU has.
//! `TOMLITE_KERNELS=<path>` forces one ([`selected`]); a name that is not a
//! path, or a path the CPU lacks, is an error naming the variable. Every
//! path computes the same integers (the products are exact in i32), so the
//! int8 encoder's output does not depend on the path.
//!
//! The f32 matrix products run in `gemm` (which picks its own kernels at
//! run time, [`f32_products`]) on every path but `amx`. There they run
//! on the AMX tile unit as three bf16 products (`x·w ≈ xₕ·wₕ + xₕ·wₗ +
//! xₗ·wₕ`, each operand split into a bf16 head and a bf16 remainder,
//! accumulated in f32): about 16 bits of each operand's mantissa, a
//! relative error near 2⁻¹⁷ per product instead of f32's 2⁻²⁴, at two to
//! three times `gemm`'s speed. Unlike the int8 products, these results
//! differ (slightly) from the other paths'.
//!
//! # Safety
//!
//! This is the only module of the crate that may use `unsafe`. A
//! [`Kernels`] value can only be made by [`Kernels::detect`] or
//! [`Kernels::force`], both of which check the CPU, so holding one proves
//! that its path's instructions exist: that is what makes calling the
//! `#[target_feature]` functions below sound. Loads and stores go through
//! pointers taken from fixed-size array chunks (`as_chunks`) of checked
//! slices, so each is in bounds by construction.

#![allow(unsafe_code)]

use std::sync::OnceLock;

/// The environment variable that forces a kernel path.
pub const KERNELS_VAR: &str = "TOMLITE_KERNELS";

/// Lengths of the int8 operands must be multiples of this (one zmm
/// register of i16).
pub const STEP: usize = 32;

/// Rows of the register tile of [`tile`].
pub const MR: usize = 6;

/// Columns (output channels) of the register tile of [`tile`].
pub const NR: usize = 2;

/// A kernel path, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// AMX tiles for the f32 and the int8 products.
    Amx,
    /// AVX-512 VNNI (`vpdpwssd` on zmm).
    Avx512Vnni,
    /// AVX-512BW (`vpmaddwd` on zmm).
    Avx512,
    /// AVX-VNNI (`vpdpwssd` on ymm).
    AvxVnni,
    /// AVX2 (`vpmaddwd` on ymm).
    Avx2,
    /// Plain Rust.
    Portable,
}

/// Every path, best first.
pub const PATHS: [Path; 6] = [
    Path::Amx,
    Path::Avx512Vnni,
    Path::Avx512,
    Path::AvxVnni,
    Path::Avx2,
    Path::Portable,
];

impl Path {
    /// The name `TOMLITE_KERNELS` takes.
    pub fn name(self) -> &'static str {
        match self {
            Path::Amx => "amx",
            Path::Avx512Vnni => "avx512vnni",
            Path::Avx512 => "avx512",
            Path::AvxVnni => "avxvnni",
            Path::Avx2 => "avx2",
            Path::Portable => "portable",
        }
    }

    /// The path named `name`, if any.
    pub fn from_name(name: &str) -> Option<Path> {
        PATHS.into_iter().find(|p| p.name() == name)
    }

    /// The CPU features the path needs (as `is_x86_feature_detected!`
    /// names them).
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Path::Amx => &[
                "avx512f",
                "avx512bw",
                "avx512vnni",
                "amx-tile",
                "amx-bf16",
                "amx-int8",
            ],
            Path::Avx512Vnni => &["avx512f", "avx512bw", "avx512vnni"],
            Path::Avx512 => &["avx512f", "avx512bw"],
            Path::AvxVnni => &["avx2", "avxvnni"],
            Path::Avx2 => &["avx2", "fma"],
            Path::Portable => &[],
        }
    }

    /// The first feature of [`Path::features`] this CPU lacks, if any.
    pub fn missing_feature(self) -> Option<&'static str> {
        self.features().iter().copied().find(|f| !has_feature(f))
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the CPU (and the OS, for the register state) supports `feature`.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn has_feature(feature: &str) -> bool {
    match feature {
        "avx2" => std::arch::is_x86_feature_detected!("avx2"),
        "fma" => std::arch::is_x86_feature_detected!("fma"),
        "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
        "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
        "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
        "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
        "amx-tile" | "amx-bf16" | "amx-int8" => amx::available(),
        _ => false,
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod amx;

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
fn has_feature(_: &str) -> bool {
    false
}

/// A kernel path this CPU has: the proof that its instructions may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kernels {
    path: Path,
}

/// Why a kernel path cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelsError {
    /// `TOMLITE_KERNELS` is not the name of a path.
    #[error(
        "{KERNELS_VAR}={value:?} is not a kernel path; expected one of amx, avx512vnni, avx512, avxvnni, avx2, portable"
    )]
    Unknown {
        /// The variable's value.
        value: String,
    },
    /// The path needs an instruction set this CPU lacks.
    #[error("{KERNELS_VAR}={path}: this CPU lacks {feature}")]
    Unsupported {
        /// The path asked for.
        path: Path,
        /// The first missing feature.
        feature: &'static str,
    },
}

impl Kernels {
    /// The best path this CPU has.
    pub fn detect() -> Kernels {
        let path = PATHS
            .into_iter()
            .find(|p| p.missing_feature().is_none())
            .unwrap_or(Path::Portable);
        Kernels { path }
    }

    /// `path`, if this CPU has it.
    pub fn force(path: Path) -> Result<Kernels, KernelsError> {
        match path.missing_feature() {
            None => Ok(Kernels { path }),
            Some(feature) => Err(KernelsError::Unsupported { path, feature }),
        }
    }

    /// The portable path (always available).
    pub fn portable() -> Kernels {
        Kernels {
            path: Path::Portable,
        }
    }

    /// The choice for a value of `TOMLITE_KERNELS` (`None`: unset, detect).
    pub fn from_env_value(value: Option<&str>) -> Result<Kernels, KernelsError> {
        match value {
            None => Ok(Kernels::detect()),
            Some(v) => {
                let path = Path::from_name(v.trim()).ok_or_else(|| KernelsError::Unknown {
                    value: v.to_string(),
                })?;
                Kernels::force(path)
            }
        }
    }

    /// The path.
    pub fn path(self) -> Path {
        self.path
    }
}

/// The process's kernel path: `TOMLITE_KERNELS` if set, else the best the
/// CPU has; decided on the first call and kept.
pub fn selected() -> Result<Kernels, KernelsError> {
    static CHOICE: OnceLock<Result<Kernels, KernelsError>> = OnceLock::new();
    CHOICE
        .get_or_init(|| {
            let value = std::env::var(KERNELS_VAR).ok();
            Kernels::from_env_value(value.as_deref())
        })
        .clone()
}

/// How kernel path `k` runs the f32 matrix products, for the summary
/// line: on the tile unit (`amx`), else in `gemm`, which chooses its own
/// kernels at run time. gemm's AVX-512 kernels sit behind its `x86-v4`
/// feature, which is off: measured on an AVX-512 Xeon they were 13 %
/// slower here (models/PERF.md), so an AVX-512 CPU runs the FMA kernels.
pub fn f32_products(k: Kernels) -> &'static str {
    match k.path {
        Path::Amx => "amx bf16x3",
        _ if has_feature("fma") => "gemm fma",
        _ => "gemm scalar",
    }
}

/// Whether kernel path `k` runs the f32 loops of [`crate::kernels`] on
/// zmm registers ([`wide`]).
pub fn is_wide(k: Kernels) -> bool {
    matches!(k.path, Path::Amx | Path::Avx512Vnni | Path::Avx512)
}

/// Runs `f`, compiled with AVX-512F/BW enabled when path `k` has them
/// ([`is_wide`]) and as the crate is compiled (AVX2) otherwise. `f` is
/// inlined into a function with those features, so that the compiler
/// vectorises its loops for zmm registers: the GELU and layer-norm
/// epilogues are plain Rust loops, and this is their one dispatch point.
/// `f` should be marked `#[inline(always)]`.
#[inline(always)]
pub fn wide<R>(k: Kernels, f: impl FnOnce() -> R) -> R {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if is_wide(k) {
        // SAFETY: `k` exists only if the CPU has its path's features
        // (Kernels::detect/force), and every wide path needs AVX-512F and
        // BW.
        return unsafe { x86::with_avx512(f) };
    }
    f()
}

/// Checks the operands of the int8 kernels: all of one length, a multiple
/// of [`STEP`]. Panics otherwise (a caller's bug).
fn check(a: &[&[i16]], b: &[&[i16]]) -> usize {
    let len = a.first().or(b.first()).map_or(0, |s| s.len());
    assert!(
        len.is_multiple_of(STEP) && a.iter().chain(b).all(|s| s.len() == len),
        "int8 kernel operands must share one length, a multiple of {STEP}"
    );
    len
}

/// `Σ a[i]·b[i]` in i32 (exact while no partial sum overflows, which the
/// activation grid guarantees). `a` and `b`: equal lengths, a multiple of
/// [`STEP`].
pub fn dot(k: Kernels, a: &[i16], b: &[i16]) -> i32 {
    check(&[a], &[b]);
    match k.path {
        Path::Portable => portable_dot(a, b),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: `k` exists only if the CPU has the path's features
        // (Kernels::detect/force); lengths were checked above.
        Path::Amx | Path::Avx512Vnni => unsafe { x86::dot_avx512vnni(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX-512F/BW.
        Path::Avx512 => unsafe { x86::dot_avx512(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX2 + AVX-VNNI.
        Path::AvxVnni => unsafe { x86::dot_avxvnni(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX2.
        Path::Avx2 => unsafe { x86::dot_avx2(a, b) },
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
        _ => portable_dot(a, b),
    }
}

/// The `MR × NR` tile: `out[r][c] = Σ a[r][i]·b[c][i]` (same conditions as
/// [`dot`]).
pub fn tile(k: Kernels, a: [&[i16]; MR], b: [&[i16]; NR]) -> [[i32; NR]; MR] {
    check(&a, &b);
    match k.path {
        Path::Portable => portable_tile(a, b),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: `k` exists only if the CPU has the path's features
        // (Kernels::detect/force); lengths were checked above.
        Path::Amx | Path::Avx512Vnni => unsafe { x86::tile_avx512vnni(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX-512F/BW.
        Path::Avx512 => unsafe { x86::tile_avx512(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX2 + AVX-VNNI.
        Path::AvxVnni => unsafe { x86::tile_avxvnni(a, b) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX2.
        Path::Avx2 => unsafe { x86::tile_avx2(a, b) },
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
        _ => portable_tile(a, b),
    }
}

/// `q[i] = round(x[i] · inv)` (ties to even) for the first `x.len()`
/// values of `q`, for `|x · inv| ≤ 32,767`. `q` is at least as long as `x`.
pub fn quantize_row(k: Kernels, x: &[f32], inv: f32, q: &mut [i16]) {
    assert!(
        q.len() >= x.len(),
        "quantize_row: output shorter than input"
    );
    let q = &mut q[..x.len()];
    match k.path {
        Path::Portable => portable_quantize(x, inv, q),
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: `k` exists only if the CPU has AVX-512F (both AVX-512
        // paths need it); `q` and `x` have the same length.
        Path::Amx | Path::Avx512Vnni | Path::Avx512 => unsafe { x86::quantize_avx512(x, inv, q) },
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        // SAFETY: as above, for AVX2 (both ymm paths need it).
        Path::AvxVnni | Path::Avx2 => unsafe { x86::quantize_avx2(x, inv, q) },
        #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
        _ => portable_quantize(x, inv, q),
    }
}

/// Rows of an AMX block: two tiles of 16.
pub const AMX_ROWS: usize = 32;

/// The reduction length of one bf16 tile (16 rows of 64 bytes hold 32
/// bf16 of each row of the left operand).
pub const AMX_K: usize = 32;

/// Output columns of an AMX block: two tiles of 16 f32.
pub const AMX_COLS: usize = 32;

/// bf16 values of one right-hand tile: 16 rows × 32 (pairs of `k` for 16
/// columns, the layout `tdpbf16ps` reads).
pub const AMX_TILE: usize = 16 * AMX_K;

/// `x` rounded to bf16 (to nearest, ties to even; the values here are
/// finite).
fn bf16(x: f32) -> u16 {
    let b = x.to_bits();
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// Splits each value into a bf16 head and a bf16 remainder: `x ≈ hi + lo`
/// to about 16 bits of mantissa. The loop is plain integer and float
/// arithmetic, which the compiler vectorises. `hi` and `lo` as long as
/// `x`.
pub fn split_bf16(x: &[f32], hi: &mut [u16], lo: &mut [u16]) {
    assert!(
        hi.len() == x.len() && lo.len() == x.len(),
        "split_bf16: lengths differ"
    );
    for ((&v, h), l) in x.iter().zip(hi.iter_mut()).zip(lo.iter_mut()) {
        let head = bf16(v);
        *h = head;
        *l = bf16(v - f32::from_bits(u32::from(head) << 16));
    }
}

/// One block of the f32 product on the `amx` path, as three bf16 products:
/// `out[r][j] = Σᵢ aₕ[r][i]·bₕ[i][j] + aₕ[r][i]·bₗ[i][j] + aₗ[r][i]·bₕ[i][j]`
/// for the block's [`AMX_ROWS`] rows and all `np` columns, accumulated in
/// f32 (the `aₗ·bₗ` term, ≈ 2⁻¹⁸ of the product, is left out).
///
/// - `a_hi`, `a_lo`: [`split_bf16`] of the block's rows, zero-padded to
///   `AMX_ROWS × kp`, in tiles: for each 16 rows, for each 32 of `k`, one
///   tile of 16 × 32 values (row-major, [`AMX_TILE`] values). Contiguous
///   tiles load faster than 16 rows `kp` apart (measured: 310 against 270
///   GFLOP/s on one core).
/// - `b_hi`, `b_lo`: `np / 16 × kp / 32` tiles of [`AMX_TILE`] values,
///   column block by column block (see `amx::Bf16x3Linear`).
/// - `out`: `AMX_ROWS × np`, row-major; overwritten.
///
/// `kp` a multiple of [`AMX_K`], `np` of [`AMX_COLS`]. Panics on another
/// path or on wrong lengths (a caller's bug).
#[allow(clippy::too_many_arguments)]
pub fn bf16x3_block(
    k: Kernels,
    a_hi: &[u16],
    a_lo: &[u16],
    kp: usize,
    b_hi: &[u16],
    b_lo: &[u16],
    np: usize,
    out: &mut [f32],
) {
    assert_eq!(k.path, Path::Amx, "bf16x3_block runs on the amx path only");
    assert!(
        kp > 0
            && kp.is_multiple_of(AMX_K)
            && np.is_multiple_of(AMX_COLS)
            && a_hi.len() == AMX_ROWS * kp
            && a_lo.len() == AMX_ROWS * kp
            && b_hi.len() == kp * np
            && b_lo.len() == kp * np
            && out.len() == AMX_ROWS * np,
        "bf16x3_block: operand shapes do not match"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `k` is on the amx path, which exists only if the CPU has
    // AMX-TILE and AMX-BF16 and the OS granted the tile state
    // (Kernels::detect/force); the lengths were checked above.
    unsafe {
        x86::bf16x3_block(a_hi, a_lo, kp, b_hi, b_lo, np, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("the amx path exists on x86_64 only")
}

/// Rows of an int8 AMX block (one tile).
pub const AMX_I8_ROWS: usize = 16;

/// The reduction length of one int8 tile (16 rows of 64 bytes).
pub const AMX_I8_K: usize = 64;

/// One block of the int8 product on the `amx` path, exactly: the i16
/// activations `x` (|x| ≤ 32,767) are split as `x = 256·hi + lo` with `hi`
/// a signed byte and `lo` an unsigned one, and the unit computes
/// `c_hi[r][j] = Σᵢ hi[r][i]·w[i][j]` (`tdpbssd`) and `c_lo[r][j] = Σᵢ
/// lo[r][i]·w[i][j]` (`tdpbusd`) in i32, so that `256·c_hi + c_lo` is the
/// integer every other path computes (see [`combine_int8`]).
///
/// - `a_hi`, `a_lo`: the block's [`AMX_I8_ROWS`] rows, zero-padded to
///   `kp`, in tiles of 16 × 64 bytes, one per 64 of `k` ([`split_i16`]).
/// - `b`: the weights, `np / 16 × kp / 64` tiles of 1,024 bytes, column
///   block by column block; row `r`, column `c`, byte `q` of a tile holds
///   `W[16·block + c][64·step + 4r + q]`.
/// - `c_hi`, `c_lo`: `AMX_I8_ROWS × np` i32, row-major; overwritten.
///
/// `kp` a multiple of [`AMX_I8_K`], `np` of [`AMX_COLS`]. Panics on
/// another path or on wrong lengths (a caller's bug).
#[allow(clippy::too_many_arguments)]
pub fn int8_amx_block(
    k: Kernels,
    a_hi: &[i8],
    a_lo: &[u8],
    kp: usize,
    b: &[i8],
    np: usize,
    c_hi: &mut [i32],
    c_lo: &mut [i32],
) {
    assert_eq!(
        k.path,
        Path::Amx,
        "int8_amx_block runs on the amx path only"
    );
    assert!(
        kp > 0
            && kp.is_multiple_of(AMX_I8_K)
            && np.is_multiple_of(AMX_COLS)
            && a_hi.len() == AMX_I8_ROWS * kp
            && a_lo.len() == AMX_I8_ROWS * kp
            && b.len() == kp * np
            && c_hi.len() == AMX_I8_ROWS * np
            && c_lo.len() == AMX_I8_ROWS * np,
        "int8_amx_block: operand shapes do not match"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `k` is on the amx path, which exists only if the CPU has
    // AMX-TILE and AMX-INT8 and the OS granted the tile state
    // (Kernels::detect/force); the lengths were checked above.
    unsafe {
        x86::int8_amx_block(a_hi, a_lo, kp, b, np, c_hi, c_lo)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("the amx path exists on x86_64 only")
}

/// Splits i16 values into a signed high byte and an unsigned low byte,
/// `x = 256·hi + lo`, for [`int8_amx_block`]. `hi` and `lo` as long as
/// `x`.
pub fn split_i16(x: &[i16], hi: &mut [i8], lo: &mut [u8]) {
    assert!(
        hi.len() == x.len() && lo.len() == x.len(),
        "split_i16: lengths differ"
    );
    for ((&v, h), l) in x.iter().zip(hi.iter_mut()).zip(lo.iter_mut()) {
        *h = (v >> 8) as i8;
        *l = v as u8;
    }
}

/// `256·hi + lo` in i32, wrapping: the partial products may not fit once
/// scaled, but the sum they make is the exact product, which the
/// activation grid keeps inside i32.
pub fn combine_int8(hi: i32, lo: i32) -> i32 {
    hi.wrapping_mul(256).wrapping_add(lo)
}

fn portable_dot(a: &[i16], b: &[i16]) -> i32 {
    a.iter()
        .zip(b)
        .fold(0i32, |s, (&x, &w)| s.wrapping_add(x as i32 * w as i32))
}

fn portable_tile(a: [&[i16]; MR], b: [&[i16]; NR]) -> [[i32; NR]; MR] {
    std::array::from_fn(|r| std::array::from_fn(|c| portable_dot(a[r], b[c])))
}

fn portable_quantize(x: &[f32], inv: f32, q: &mut [i16]) {
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * inv).round_ties_even() as i16;
    }
}

/// The x86 kernels.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod x86;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_variable_names_a_path_or_fails_naming_itself() {
        assert_eq!(
            Kernels::from_env_value(Some("portable")),
            Ok(Kernels::portable())
        );
        assert_eq!(Kernels::from_env_value(None), Ok(Kernels::detect()));
        let err = Kernels::from_env_value(Some("avx1024")).unwrap_err();
        assert!(
            err.to_string().contains("TOMLITE_KERNELS=\"avx1024\""),
            "{err}"
        );
        for p in PATHS {
            match (Kernels::from_env_value(Some(p.name())), p.missing_feature()) {
                (Ok(k), None) => assert_eq!(k.path(), p),
                (Err(e), Some(f)) => {
                    let msg = e.to_string();
                    assert!(msg.contains("TOMLITE_KERNELS") && msg.contains(f), "{msg}");
                }
                (got, missing) => panic!("{p}: {got:?} with missing feature {missing:?}"),
            }
        }
    }
}
