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

/// AMX: what the CPU says (`cpuid`) and whether the OS lets this process
/// use the tile registers (Linux: `arch_prctl(ARCH_REQ_XCOMP_PERM)`).
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod amx {
    use std::sync::OnceLock;

    /// `cpuid` leaf 7, sub-leaf 0, EDX: AMX-BF16 (bit 22), AMX-TILE (bit
    /// 24) and AMX-INT8 (bit 25).
    const AMX_BF16_TILE: u32 = (1 << 22) | (1 << 24) | (1 << 25);

    /// Whether the tile unit with bf16 and int8 products may be used by
    /// this process; the permission is asked for once.
    pub(super) fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| cpu_has_amx() && os_permits())
    }

    #[cfg(target_arch = "x86_64")]
    fn cpu_has_amx() -> bool {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        __cpuid(0).eax >= 7 && __cpuid_count(7, 0).edx & AMX_BF16_TILE == AMX_BF16_TILE
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn cpu_has_amx() -> bool {
        false
    }

    /// Linux gives a process the tile registers' state only on request
    /// (the state is 8 KiB per thread): `arch_prctl(ARCH_REQ_XCOMP_PERM,
    /// XFEATURE_XTILEDATA)`. The permission is per process and lasts for
    /// its life; a kernel that does not know the request answers with an
    /// error, and then the path is unavailable.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn os_permits() -> bool {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        // SAFETY: the system call takes two integers, touches no memory of
        // this process and only extends what the process may do; `rcx` and
        // `r11` are clobbered by `syscall` and declared so.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    fn os_permits() -> bool {
        false
    }
}

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

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod x86 {
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
        sum6_256(v.map(|v| {
            _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
        }))
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
}

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
