//! Encoder benchmarks: the whole forward pass of all-MiniLM-L6-v2 per
//! batch shape (texts × tokens, packed), and the matrix products of one
//! layer, each in f32 (candle's gemm) and int8 ([`QuantLinear`]).
//!
//! `cargo bench -p tomlite-models --bench encoder` (the forward pass needs
//! `scripts/fetch-model`; without the model it is skipped with a note).

use candle_core::{Device, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tomlite_models::bert::{BertModel, Config, Precision};
use tomlite_models::quant::QuantLinear;

/// FLOPs of the matrix products of one token (6 layers of 384 → 1152, 384
/// → 384, 384 → 1536, 1536 → 384, two per multiply-add).
const FLOPS_PER_TOKEN: u64 = 6 * 2 * (384 * 1152 + 384 * 384 + 384 * 1536 + 1536 * 384);

fn forward(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(tomlite_models::DEFAULT_MODEL_DIR.trim_start_matches("models/"));
    let Ok(weights) = std::fs::read(dir.join("model.safetensors")) else {
        eprintln!(
            "forward: no model in {} (run scripts/fetch-model); skipped",
            dir.display()
        );
        return;
    };
    let config: Config =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config.json"))
            .expect("a BERT config");
    let mut group = c.benchmark_group("forward");
    group.sample_size(10);
    for precision in [Precision::F32, Precision::Int8] {
        let vb = candle_nn::VarBuilder::from_buffered_safetensors(
            weights.clone(),
            candle_core::DType::F32,
            &Device::Cpu,
        )
        .expect("weights");
        let model = BertModel::load_with_precision(vb, &config, precision).expect("model");
        // (texts, tokens per text): short chat lines to long journal entries.
        for &(texts, len) in &[(64usize, 16usize), (32, 32), (8, 128), (4, 256)] {
            let lengths = vec![len; texts];
            let rows = texts * len;
            let ids: Vec<u32> = (0..rows as u32)
                .map(|i| 1000 + (i * 7919) % 28000)
                .collect();
            let types = vec![0u32; rows];
            group.throughput(Throughput::Elements(rows as u64));
            group.bench_function(
                BenchmarkId::new(precision.as_str(), format!("{texts}x{len}")),
                |b| {
                    b.iter(|| {
                        model
                            .forward_packed(&ids, &types, &lengths)
                            .expect("forward")
                    })
                },
            );
        }
    }
    eprintln!("forward: {FLOPS_PER_TOKEN} matrix FLOPs per token (tokens/s × this = FLOP/s)");
    group.finish();
}

fn matrices(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut group = c.benchmark_group("linear");
    group.sample_size(20);
    // (rows = tokens in a batch, in, out): QKV, attention output, FFN up, FFN down.
    for &(rows, k, n) in &[
        (640, 384, 1152),
        (640, 384, 384),
        (640, 384, 1536),
        (640, 1536, 384),
        (4096, 384, 1536),
    ] {
        let w = Tensor::randn(0f32, 0.05, (n, k), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (rows, k), &dev).unwrap();
        let wt = w.t().unwrap();
        let q = QuantLinear::quantize(&w).unwrap();
        group.throughput(Throughput::Elements((2 * rows * k * n) as u64));
        let shape = format!("{rows}x{k}x{n}");
        group.bench_with_input(BenchmarkId::new("f32", &shape), &x, |b, x| {
            b.iter(|| x.matmul(&wt).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("int8", &shape), &x, |b, x| {
            b.iter(|| q.forward(x).unwrap())
        });
    }
    group.finish();
}

// criterion's macro defines an undocumented `pub fn benches`.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, forward, matrices);
}
criterion_main!(group::benches);
