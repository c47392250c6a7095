//! Wall-clock time per encoder operation, collected when the environment
//! variable `TOMLITE_PROFILE` is set (to anything) and printed by
//! `tomlite annotate`; `models/PERF.md` is written from it.
//!
//! Off, it costs one relaxed load per operation. On, two `Instant::now()`
//! and an atomic add; the operations it wraps take 0.1 ms and more.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The timed operations, in the order of the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// WordPiece tokenisation with special tokens and truncation.
    Tokenize,
    /// Word + position + type embeddings and their layer norm.
    Embeddings,
    /// The fused query/key/value projection (matrix product).
    QkvMatmul,
    /// Scores, softmax and the weighted sum of values (attention kernel).
    Attention,
    /// The attention output projection (matrix product).
    AttentionOutMatmul,
    /// Bias + residual + layer norm after attention.
    AttentionOutNorm,
    /// The feed-forward expansion (matrix product).
    FfnUpMatmul,
    /// Bias + GELU of the expansion.
    FfnGelu,
    /// The feed-forward contraction (matrix product).
    FfnDownMatmul,
    /// Bias + residual + layer norm after the feed-forward block.
    FfnOutNorm,
    /// Mean pooling of texts and spans, L2 normalisation.
    Pooling,
}

/// Every operation, in report order.
pub const OPS: [Op; 11] = [
    Op::Tokenize,
    Op::Embeddings,
    Op::QkvMatmul,
    Op::Attention,
    Op::AttentionOutMatmul,
    Op::AttentionOutNorm,
    Op::FfnUpMatmul,
    Op::FfnGelu,
    Op::FfnDownMatmul,
    Op::FfnOutNorm,
    Op::Pooling,
];

impl Op {
    /// Short name for the report.
    pub fn name(self) -> &'static str {
        match self {
            Op::Tokenize => "tokenize",
            Op::Embeddings => "embeddings + layer norm",
            Op::QkvMatmul => "QKV matmul",
            Op::Attention => "attention (scores, softmax, ·V)",
            Op::AttentionOutMatmul => "attention output matmul",
            Op::AttentionOutNorm => "bias + residual + layer norm",
            Op::FfnUpMatmul => "FFN up matmul",
            Op::FfnGelu => "bias + GELU",
            Op::FfnDownMatmul => "FFN down matmul",
            Op::FfnOutNorm => "bias + residual + layer norm (FFN)",
            Op::Pooling => "pooling + normalise",
        }
    }
}

static NANOS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];
static CALLS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];

/// Whether `TOMLITE_PROFILE` is set (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TOMLITE_PROFILE").is_some())
}

/// Runs `f`, adding its wall-clock time to `op` when profiling is on.
#[inline]
pub fn time<T>(op: Op, f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let started = Instant::now();
    let out = f();
    let i = op as usize;
    NANOS[i].fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    CALLS[i].fetch_add(1, Ordering::Relaxed);
    out
}

/// Seconds and calls per operation so far, in [`OPS`] order.
pub fn totals() -> Vec<(Op, f64, u64)> {
    OPS.iter()
        .map(|&op| {
            let i = op as usize;
            (
                op,
                NANOS[i].load(Ordering::Relaxed) as f64 / 1e9,
                CALLS[i].load(Ordering::Relaxed),
            )
        })
        .collect()
}
