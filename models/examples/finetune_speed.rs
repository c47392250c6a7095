//! Training speed of LoRA fine-tuning on the real all-MiniLM-L6-v2: steps
//! of batch 16 on texts of about 64 tokens, examples per second and peak
//! resident memory. Not a test; run
//! `cargo run --release -p tomlite-models --example finetune_speed -- [steps] [mix]`.
//! With `mix`, the examples are the real mix instead: every third a
//! ToM-lite record of `data/training/tom_lite` (all heads), the others
//! GoEmotions train comments from `data/goemotions` (affect
//! only), as a full train sees them.

use std::path::Path;
use std::time::Instant;

use tomlite_models::finetune::{Example, FineTuneOptions, FineTuner, HeadSpecs};
use tomlite_models::heads::HeadSpec;
use tomlite_models::{EncodeOptions, Encoder};

fn spec(name: &str, n: usize, multi_label: bool, hidden: usize) -> HeadSpec {
    HeadSpec {
        wording_cues: false,
        name: name.into(),
        labels: (0..n).map(|i| format!("{name}{i}")).collect(),
        multi_label,
        hidden,
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(6);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tuner = FineTuner::load(&root.join(tomlite_models::DEFAULT_MODEL_DIR))?;
    // About 64 word pieces each, all different.
    let sentence = "I told Sam I would finish the report tonight, but honestly I am exhausted \
                    and a little worried that the numbers will not add up before the meeting, \
                    and if they do not, he will be the one who has to explain it to the board \
                    on Friday morning at nine";
    let mix = std::env::args().nth(2).as_deref() == Some("mix");
    let examples: Vec<Example> = if mix {
        mixed(&root, 16 * steps)?
    } else {
        (0..16 * steps)
            .map(|i| {
                let text = format!("{sentence} number {i}.");
                let mut kinds = vec![0.0; 8];
                kinds[i % 8] = 1.0;
                match i % 3 {
                    0 => Example::record(text, kinds, (i % 6) as u32, (i % 3) as u32),
                    1 => Example::sentence(text, kinds),
                    _ => Example::affect_only(text, (i % 6) as u32),
                }
            })
            .collect()
    };
    let texts: Vec<&str> = examples.iter().map(|e| e.text.as_str()).collect();
    let lengths: Vec<usize> = tuner
        .tokenize(&texts, 128)?
        .iter()
        .map(|(t, _)| t.len())
        .collect();
    let specs = HeadSpecs {
        tom_kind: spec("tom_kind", 8, true, 0),
        affect: spec("affect", 6, false, 512),
        intensity: spec("intensity", 3, false, 0),
        sensitive: None,
    };
    let opts = FineTuneOptions {
        epochs: 1,
        ..FineTuneOptions::default()
    };
    let started = Instant::now();
    let mut first_step = None;
    let ft = tuner.train(&examples, &specs, &opts, &mut |p| {
        if first_step.is_none() {
            first_step = Some(started.elapsed());
        }
        eprintln!(
            "step {}/{} loss {:.4} {:.2} examples/s ETA {:.0}s",
            p.step,
            p.steps,
            p.loss,
            p.examples_per_s,
            p.eta.as_secs_f64()
        );
    })?;
    let total = started.elapsed().as_secs_f64();
    let first = first_step.map_or(0.0, |d| d.as_secs_f64());
    let later = (examples.len() - 16) as f64 / (total - first).max(1e-9);
    println!(
        "tokens per text {}..{} (mean {:.1}); {} steps of 16: {:.1}s, first step {:.1}s, \
         {later:.2} examples/s after the first step; adapters {} values; peak RSS {} MiB; \
         threads {}",
        lengths.iter().min().unwrap_or(&0),
        lengths.iter().max().unwrap_or(&0),
        lengths.iter().sum::<usize>() as f64 / lengths.len().max(1) as f64,
        steps,
        total,
        first,
        ft.adapters.parameter_count(),
        peak_rss_kib().unwrap_or(0) / 1024,
        rayon_threads(),
    );
    // The trained adapters merged into the fused f32 path against the
    // unmerged training forward, and the training forward without adapters
    // against the base encoder, on the first texts.
    let sample: Vec<&str> = texts.iter().take(16).copied().collect();
    let batch = tuner.batch(&sample, 256)?;
    let max_diff = |a: &[Vec<f32>], b: &[Vec<f32>]| -> f32 {
        a.iter()
            .zip(b)
            .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
            .fold(0.0, f32::max)
    };
    let model_dir = root.join(tomlite_models::DEFAULT_MODEL_DIR);
    let base = Encoder::load(&model_dir)?.encode(&sample)?.embeddings;
    let plain = tuner.model().forward(&batch, None)?.to_vec2::<f32>()?;
    let out = std::env::temp_dir().join(format!("finetune-speed-{}", std::process::id()));
    ft.save(&out, &ft.card(serde_json::json!({}), serde_json::json!({})))?;
    let merged = Encoder::load_with_adapters(
        &model_dir,
        &out.join(tomlite_models::finetune::ADAPTERS_FILE),
        EncodeOptions::default(),
    )?
    .encode(&sample)?
    .embeddings;
    std::fs::remove_dir_all(&out)?;
    let unmerged = tuner
        .model()
        .forward(&batch, Some(&ft.adapters))?
        .to_vec2::<f32>()?;
    println!(
        "max |difference|: training forward without adapters vs encoder {:.2e}; \
         merged encoder vs unmerged training forward {:.2e}; adapters moved the \
         vectors by {:.2e}",
        max_diff(&plain, &base),
        max_diff(&merged, &unmerged),
        max_diff(&unmerged, &base),
    );
    Ok(())
}

/// `n` examples: a ToM-lite record every third, GoEmotions comments between.
fn mixed(root: &Path, n: usize) -> Result<Vec<Example>, Box<dyn std::error::Error>> {
    let mut records = Vec::new();
    for entry in std::fs::read_dir(root.join("data/training/tom_lite"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            records.extend(tomlite_models::data::read_labeled(&path)?);
        }
    }
    records.sort_by(|a, b| a.id.cmp(&b.id));
    let comments =
        tomlite_models::data::read_goemotions(&root.join("../data/goemotions/train.tsv"))?;
    let (mut r, mut c) = (records.iter().cycle(), comments.iter().cycle());
    Ok((0..n)
        .map(|i| {
            if i % 3 == 0 {
                let rec = r.next().expect("records");
                Example::record(rec.text.clone(), vec![0.0; 8], 0, 0)
            } else {
                Example::affect_only(c.next().expect("comments").text.clone(), 0)
            }
        })
        .collect())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
