//! LoRA fine-tuning on the tiny random BERT: the differentiable forward
//! against the inference path, gradients, masking, the merge, save/load and
//! checkpoints.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor, Var};
use tomlite_models::bert::Precision;
use tomlite_models::finetune::{
    ADAPTERS_FILE, Example, FineTuneOptions, FineTuned, FineTuner, HeadSpecs, Progress, Trainable,
};
use tomlite_models::heads::{HeadSpec, Rng};
use tomlite_models::lora::{LoraConfig, LoraTarget};
use tomlite_models::{EncodeOptions, Encoder};

use crate::tiny::tiny_dir;

fn specs() -> HeadSpecs {
    let spec = |name: &str, n: usize, multi_label: bool, hidden: usize| HeadSpec {
        wording_cues: false,
        name: name.into(),
        labels: (0..n).map(|i| format!("{name}{i}")).collect(),
        multi_label,
        hidden,
    };
    HeadSpecs {
        tom_kind: spec("tom_kind", 4, true, 0),
        affect: spec("affect", 3, false, 8),
        intensity: spec("intensity", 3, false, 0),
        sensitive: None,
    }
}

const TEXTS: &[&str] = &[
    "the cat sat on the mat",
    "a dog ran home",
    "keep answers short",
    "sam likes cats",
    "the dog sat",
    "a cat ran on the mat .",
    "sam likes the dog , the cat sat",
    "short answers",
];

/// Records, sentences and affect-only examples with learnable targets.
fn examples() -> Vec<Example> {
    TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut kinds = vec![0.0; 4];
            kinds[i % 4] = 1.0;
            match i % 3 {
                0 => Example::record(*t, kinds, (i % 3) as u32, (i % 2) as u32),
                1 => Example::sentence(*t, kinds),
                _ => Example::affect_only(*t, (i % 3) as u32),
            }
        })
        .collect()
}

fn options() -> FineTuneOptions {
    FineTuneOptions {
        lora: LoraConfig {
            rank: 4,
            alpha: 8.0,
            targets: LoraTarget::ALL.to_vec(),
        },
        epochs: 2,
        batch_size: 3,
        learning_rate: 1e-2,
        ..FineTuneOptions::default()
    }
}

/// Sets every adapter's B to small random values, as training would: with
/// B at zero the gradient of A is zero by construction.
fn randomise_b(state: &Trainable, seed: u64) {
    let mut rng = Rng::new(seed);
    for (_, _, b) in state.adapters.pairs() {
        let dims = b.dims2().unwrap();
        let v: Vec<f32> = (0..dims.0 * dims.1).map(|_| rng.uniform(0.2)).collect();
        b.set(&Tensor::from_vec(v, dims, &Device::Cpu).unwrap())
            .unwrap();
    }
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_vec2::<f32>().unwrap()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

fn fine_tuned(tuner: &FineTuner, state: &Trainable) -> FineTuned {
    FineTuned {
        adapters: state.adapters.clone(),
        tom_kind: state.tom_kind.to_head().unwrap(),
        affect: state.affect.to_head().unwrap(),
        intensity: state.intensity.to_head().unwrap(),
        sensitive: None,
        base_sha256: tuner.sha256().to_string(),
        options: options(),
        epoch_losses: Vec::new(),
    }
}

fn tensors(file: &Path) -> HashMap<String, Vec<f32>> {
    candle_core::safetensors::load(file, &Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, v.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

// The training forward must compute what inference computes, or the heads
// learn on one embedding and score another.
#[test]
fn differentiable_forward_with_zero_b_adapters_equals_the_inference_forward() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let state = tuner.init(&specs(), &options()).unwrap();
    let batch = tuner.batch(TEXTS, 256).unwrap();
    // Padded: the texts have different lengths.
    assert!(batch.lengths().iter().min() < batch.lengths().iter().max());
    let trained = rows(
        &tuner
            .model()
            .forward(&batch, Some(&state.adapters))
            .unwrap(),
    );
    let plain = rows(&tuner.model().forward(&batch, None).unwrap());
    let encoder = Encoder::load(dir.path()).unwrap();
    let inference = encoder.encode(TEXTS).unwrap().embeddings;
    let d = max_diff(&trained, &inference);
    assert!(d < 1e-5, "zero-B forward vs inference: {d}");
    assert_eq!(trained, plain, "zero B changes nothing");
}

// Merging W + B·A·alpha/r at load must give the model that was trained, on
// the fused f32 path and (looser) on int8; the adapters' hash names it.
#[test]
fn merged_fast_path_equals_the_unmerged_differentiable_forward() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let state = tuner.init(&specs(), &options()).unwrap();
    randomise_b(&state, 5);
    let batch = tuner.batch(TEXTS, 256).unwrap();
    let unmerged = rows(
        &tuner
            .model()
            .forward(&batch, Some(&state.adapters))
            .unwrap(),
    );

    let out = tempfile::tempdir().unwrap();
    let ft = fine_tuned(&tuner, &state);
    let sha = ft
        .save(
            out.path(),
            &ft.card(serde_json::json!({}), serde_json::json!({})),
        )
        .unwrap();
    let file = out.path().join(ADAPTERS_FILE);
    let merged = Encoder::load_with_adapters(dir.path(), &file, EncodeOptions::default()).unwrap();
    assert_eq!(merged.adapters_sha256(), Some(sha.as_str()));
    let got = merged.encode(TEXTS).unwrap().embeddings;
    let d = max_diff(&got, &unmerged);
    assert!(d < 1e-5, "merged f32 vs unmerged: {d}");
    // The adapters matter: the base model gives other vectors.
    let base = Encoder::load(dir.path())
        .unwrap()
        .encode(TEXTS)
        .unwrap()
        .embeddings;
    assert!(
        max_diff(&base, &unmerged) > 1e-2,
        "adapters change the vectors"
    );
    assert_eq!(Encoder::load(dir.path()).unwrap().adapters_sha256(), None);

    let int8 = Encoder::load_with_adapters(
        dir.path(),
        &file,
        EncodeOptions {
            precision: Precision::Int8,
            ..EncodeOptions::default()
        },
    )
    .unwrap();
    let got = int8.encode(TEXTS).unwrap().embeddings;
    let d = max_diff(&got, &unmerged);
    assert!(d < 5e-2, "merged int8 vs unmerged: {d}");

    // Other adapters, another identity.
    randomise_b(&state, 6);
    let other = tempfile::tempdir().unwrap();
    let ft = fine_tuned(&tuner, &state);
    let sha2 = ft
        .save(
            other.path(),
            &ft.card(serde_json::json!({}), serde_json::json!({})),
        )
        .unwrap();
    assert_ne!(sha, sha2);
}

// A parameter without a gradient would silently stay at its init.
#[test]
fn every_trainable_parameter_has_a_gradient_after_one_backward() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let opts = options();
    let state = tuner.init(&specs(), &opts).unwrap();
    randomise_b(&state, 7);
    let ex = examples();
    let refs: Vec<&Example> = ex.iter().collect();
    let batch = tuner.batch(TEXTS, 256).unwrap();
    let losses = tuner
        .losses(&state, &batch, &refs, &vec![None; refs.len()], &opts)
        .unwrap();
    let grads = losses.total.backward().unwrap();
    let vars = state.vars();
    // 2 layers × 6 targets × (A, B) + tom_kind 2 + affect 4 + intensity 2.
    assert_eq!(vars.len(), 2 * 6 * 2 + 2 + 4 + 2);
    for (name, var) in &vars {
        let g = grads
            .get(var)
            .unwrap_or_else(|| panic!("{name} has no gradient"));
        let size = g
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(size > 0.0 && size.is_finite(), "{name}: gradient {size}");
    }
}

// An affect-only (GoEmotions) example must not train the kind head.
#[test]
fn masked_goemotions_only_batch_leaves_tom_kind_head_gradients_zero() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let opts = options();
    let state = tuner.init(&specs(), &opts).unwrap();
    let ex: Vec<Example> = TEXTS[..4]
        .iter()
        .enumerate()
        .map(|(i, t)| Example::affect_only(*t, (i % 3) as u32))
        .collect();
    let refs: Vec<&Example> = ex.iter().collect();
    let batch = tuner.batch(&TEXTS[..4], 256).unwrap();
    let losses = tuner
        .losses(&state, &batch, &refs, &vec![None; refs.len()], &opts)
        .unwrap();
    assert_eq!(losses.tom_kind.to_scalar::<f32>().unwrap(), 0.0);
    assert_eq!(losses.intensity.to_scalar::<f32>().unwrap(), 0.0);
    let grads = losses.total.backward().unwrap();
    let size = |v: &Var| {
        grads.get(v).map_or(0.0, |g| {
            g.abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        })
    };
    for (name, var) in state.tom_kind.vars().iter().chain(&state.intensity.vars()) {
        assert_eq!(size(var), 0.0, "{name} must get no gradient");
    }
    for (name, var) in &state.affect.vars() {
        assert!(size(var) > 0.0, "{name} must get a gradient");
    }
}

/// Mean cosine of the tuned vectors of `TEXTS` to the base vectors.
fn mean_cosine_to_base(tuner: &FineTuner, adapters: &tomlite_models::lora::Adapters) -> f32 {
    let base = tuner.base_vectors(TEXTS, 256).unwrap();
    let batch = tuner.batch(TEXTS, 256).unwrap();
    let tuned = rows(&tuner.model().forward(&batch, Some(adapters)).unwrap());
    let sum: f32 = tuned
        .iter()
        .zip(&base)
        .map(|(t, b)| t.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())
        .sum();
    sum / TEXTS.len() as f32
}

// The similarity term measures how far the adapters moved the sentence
// vectors from the base encoder's: nothing at the start (B = 0), something
// once they move, and nothing for examples without an anchor.
#[test]
fn the_similarity_term_is_zero_at_the_base_and_grows_as_the_adapters_move() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let opts = options();
    let state = tuner.init(&specs(), &opts).unwrap();
    let ex = examples();
    let refs: Vec<&Example> = ex.iter().collect();
    let batch = tuner.batch(TEXTS, 256).unwrap();
    let base = tuner.base_vectors(TEXTS, 256).unwrap();
    let anchors: Vec<Option<&[f32]>> = base.iter().map(|v| Some(v.as_slice())).collect();
    let at_init = tuner
        .losses(&state, &batch, &refs, &anchors, &opts)
        .unwrap()
        .similarity
        .to_scalar::<f32>()
        .unwrap();
    assert!(at_init.abs() < 1e-5, "similarity at B = 0: {at_init}");
    randomise_b(&state, 7);
    let moved = tuner
        .losses(&state, &batch, &refs, &anchors, &opts)
        .unwrap();
    let gap = moved.similarity.to_scalar::<f32>().unwrap();
    assert!(gap > 1e-4, "similarity once the adapters move: {gap}");
    let total = moved.total.to_scalar::<f32>().unwrap();
    let parts: f32 = [&moved.tom_kind, &moved.affect, &moved.intensity]
        .iter()
        .map(|t| t.to_scalar::<f32>().unwrap())
        .sum();
    let weight = opts.similarity_weight as f32;
    assert!((total - parts - weight * gap).abs() < 1e-4);
    let none = tuner
        .losses(&state, &batch, &refs, &vec![None; refs.len()], &opts)
        .unwrap();
    assert_eq!(none.similarity.to_scalar::<f32>().unwrap(), 0.0);
}

// Without the similarity term the tuned vectors drift away from the base
// ones that memory links rank by; with it they stay closer.
#[test]
fn training_with_the_similarity_term_keeps_vectors_nearer_the_base() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let train = |weight: f64| {
        let opts = FineTuneOptions {
            epochs: 6,
            similarity_weight: weight,
            ..options()
        };
        let ft = tuner
            .train(&examples(), &specs(), &opts, &mut |_| {})
            .unwrap();
        mean_cosine_to_base(&tuner, &ft.adapters)
    };
    let free = train(0.0);
    let held = train(20.0);
    assert!(held > free, "with the term {held}, without {free}");
    assert!(
        1.0 - held < (1.0 - free) * 0.5,
        "with the term {held}, without {free}"
    );
}

// A fresh draw of affect-only examples each epoch: the epoch has the other
// examples plus the draw, and the run is still deterministic.
#[test]
fn affect_only_examples_are_drawn_per_epoch_when_asked() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    // examples(): 8, of which 2 (i % 3 == 2) are affect-only.
    let opts = FineTuneOptions {
        epochs: 2,
        batch_size: 1,
        affect_only_per_epoch: Some(1),
        ..options()
    };
    let mut seen: Vec<Progress> = Vec::new();
    let ft = tuner
        .train(&examples(), &specs(), &opts, &mut |p| seen.push(p.clone()))
        .unwrap();
    assert_eq!(seen.last().unwrap().steps, 2 * 7);
    assert_eq!(seen.len(), 2 * 7);
    let again = tuner
        .train(&examples(), &specs(), &opts, &mut |_| {})
        .unwrap();
    assert_eq!(again.epoch_losses, ft.epoch_losses);
    // Resumed after the first epoch, the second draws what it drew in the
    // uninterrupted run (the checkpoint keeps the generator).
    let cp = tempfile::tempdir().unwrap();
    let first = FineTuneOptions {
        epochs: 1,
        checkpoint_dir: Some(cp.path().to_path_buf()),
        ..opts.clone()
    };
    tuner
        .train(&examples(), &specs(), &first, &mut |_| {})
        .unwrap();
    let resumed = tuner
        .train(
            &examples(),
            &specs(),
            &FineTuneOptions {
                resume: true,
                epochs: 2,
                ..first
            },
            &mut |_| {},
        )
        .unwrap();
    // The second epoch is computed again, bit for bit; the first one's mean
    // comes back from the checkpoint's JSON (within an ulp).
    assert_eq!(resumed.epoch_losses[1], ft.epoch_losses[1]);
    assert!((resumed.epoch_losses[0] - ft.epoch_losses[0]).abs() < 1e-12);
    let probe = tuner.batch(TEXTS, 256).unwrap();
    assert_eq!(
        rows(
            &tuner
                .model()
                .forward(&probe, Some(&resumed.adapters))
                .unwrap()
        ),
        rows(&tuner.model().forward(&probe, Some(&ft.adapters)).unwrap())
    );
}

// The optional sensitive head: its examples train it (and the adapters)
// only, the others never touch it, and it is saved with the adapters.
#[test]
fn a_sensitive_head_trains_on_its_own_examples_and_round_trips() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let with = HeadSpecs {
        sensitive: Some(HeadSpec {
            wording_cues: false,
            name: "sensitive".into(),
            labels: vec!["none".into(), "health".into(), "credentials_pii".into()],
            multi_label: false,
            hidden: 0,
        }),
        ..specs()
    };
    let opts = options();
    let state = tuner.init(&with, &opts).unwrap();
    let only: Vec<Example> = TEXTS[..4]
        .iter()
        .enumerate()
        .map(|(i, t)| Example::sensitive_only(*t, (i % 3) as u32))
        .collect();
    let refs: Vec<&Example> = only.iter().collect();
    let batch = tuner.batch(&TEXTS[..4], 256).unwrap();
    let losses = tuner
        .losses(&state, &batch, &refs, &vec![None; refs.len()], &opts)
        .unwrap();
    assert!(losses.sensitive.to_scalar::<f32>().unwrap() > 0.0);
    assert_eq!(losses.tom_kind.to_scalar::<f32>().unwrap(), 0.0);
    let grads = losses.total.backward().unwrap();
    let size = |v: &Var| {
        grads.get(v).map_or(0.0, |g| {
            g.abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        })
    };
    for (name, var) in state.sensitive.as_ref().unwrap().vars() {
        assert!(size(&var) > 0.0, "{name} must get a gradient");
    }
    for (name, var) in state.affect.vars().iter().chain(&state.tom_kind.vars()) {
        assert_eq!(size(var), 0.0, "{name} must get no gradient");
    }
    // Mixed with the other examples, a run trains it and saves it.
    let mut ex = examples();
    ex.extend(only);
    let ft = tuner.train(&ex, &with, &opts, &mut |_| {}).unwrap();
    let out = tempfile::tempdir().unwrap();
    ft.save(
        out.path(),
        &ft.card(serde_json::json!({}), serde_json::json!({})),
    )
    .unwrap();
    let (back, card) = FineTuned::load(out.path()).unwrap();
    assert_eq!(card.heads.sensitive, with.sensitive);
    let x = tuner
        .model()
        .forward(&tuner.batch(TEXTS, 256).unwrap(), Some(&ft.adapters))
        .unwrap();
    assert_eq!(
        back.sensitive.unwrap().probabilities(&x).unwrap(),
        ft.sensitive.unwrap().probabilities(&x).unwrap()
    );
    // A sensitive label without the head is refused.
    let err = tuner
        .train(&ex, &specs(), &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("without a sensitive head"), "{err}");
}

#[test]
fn a_few_training_steps_lower_the_loss() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let opts = FineTuneOptions {
        epochs: 6,
        ..options()
    };
    let mut seen: Vec<Progress> = Vec::new();
    let ft = tuner
        .train(&examples(), &specs(), &opts, &mut |p| seen.push(p.clone()))
        .unwrap();
    let l = &ft.epoch_losses;
    assert_eq!(l.len(), 6);
    assert!(l[5] < l[0] * 0.8, "epoch losses {l:?}");
    // 8 examples in batches of 3: 3 steps per epoch.
    assert_eq!(seen.len(), 18);
    assert_eq!(seen.last().unwrap().step, 18);
    assert_eq!(seen.last().unwrap().steps, 18);
    assert!(seen.iter().filter(|p| p.epoch_done).count() == 6);
    assert!(
        seen.iter()
            .all(|p| p.examples_per_s > 0.0 && p.loss.is_finite())
    );
    // Same seed, same result.
    let again = tuner
        .train(&examples(), &specs(), &opts, &mut |_| {})
        .unwrap();
    assert_eq!(again.epoch_losses, ft.epoch_losses);
}

#[test]
fn adapters_and_heads_round_trip_through_safetensors_bit_exact() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let opts = FineTuneOptions {
        epochs: 1,
        ..options()
    };
    let ft = tuner
        .train(&examples(), &specs(), &opts, &mut |_| {})
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let card = ft.card(
        serde_json::json!({"train.jsonl": "abc"}),
        serde_json::json!({"affect_macro_f1": 0.5}),
    );
    let sha = ft.save(out.path(), &card).unwrap();
    let (back, card_back) = FineTuned::load(out.path()).unwrap();
    assert_eq!(card_back.adapters_sha256, sha);
    assert_eq!(card_back.lora, opts.lora);
    assert_eq!(card_back.seed, opts.seed);
    assert_eq!(card_back.epochs, 1);
    assert_eq!(card_back.data["train.jsonl"], "abc");
    assert_eq!(card_back.base_sha256, tuner.sha256());
    let pairs = |f: &FineTuned| -> Vec<(String, Vec<f32>, Vec<f32>)> {
        f.adapters
            .pairs()
            .map(|(k, a, b)| {
                (
                    k.to_string(),
                    a.flatten_all().unwrap().to_vec1().unwrap(),
                    b.flatten_all().unwrap().to_vec1().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(pairs(&back), pairs(&ft));
    assert!(
        pairs(&ft)
            .iter()
            .any(|(_, _, b)| b.iter().any(|&x| x != 0.0))
    );
    let x = tuner
        .model()
        .forward(&tuner.batch(TEXTS, 256).unwrap(), Some(&ft.adapters))
        .unwrap();
    for (a, b) in [
        (&ft.tom_kind, &back.tom_kind),
        (&ft.affect, &back.affect),
        (&ft.intensity, &back.intensity),
    ] {
        assert_eq!(a.logits_rows(&x).unwrap(), b.logits_rows(&x).unwrap());
    }
    // A changed file no longer matches its card.
    let file = out.path().join(ADAPTERS_FILE);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let err = FineTuned::load(out.path()).unwrap_err().to_string();
    assert!(err.contains(ADAPTERS_FILE), "{err}");
}

// A run stopped after an epoch and resumed must end where one that ran
// straight through ends, for the same seed.
#[test]
fn checkpoint_and_resume_equal_an_uninterrupted_run() {
    let dir = tiny_dir();
    let tuner = FineTuner::load(dir.path()).unwrap();
    let straight = tuner
        .train(&examples(), &specs(), &options(), &mut |_| {})
        .unwrap();

    let cp = tempfile::tempdir().unwrap();
    let first = FineTuneOptions {
        epochs: 1,
        checkpoint_dir: Some(cp.path().to_path_buf()),
        ..options()
    };
    tuner
        .train(&examples(), &specs(), &first, &mut |_| {})
        .unwrap();
    let mut epochs_seen = Vec::new();
    let resumed = tuner
        .train(
            &examples(),
            &specs(),
            &FineTuneOptions {
                resume: true,
                epochs: 2,
                ..first.clone()
            },
            &mut |p| epochs_seen.push((p.epoch, p.step)),
        )
        .unwrap();
    assert_eq!(epochs_seen, vec![(2, 4), (2, 5), (2, 6)]);
    assert_eq!(resumed.epoch_losses, straight.epoch_losses);
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (out.path().join("a"), out.path().join("b"));
    straight
        .save(
            &a,
            &straight.card(serde_json::json!({}), serde_json::json!({})),
        )
        .unwrap();
    resumed
        .save(
            &b,
            &resumed.card(serde_json::json!({}), serde_json::json!({})),
        )
        .unwrap();
    assert_eq!(
        tensors(&a.join(ADAPTERS_FILE)),
        tensors(&b.join(ADAPTERS_FILE))
    );

    // Another run's checkpoint is refused, naming the file.
    let err = tuner
        .train(
            &examples()[..5],
            &specs(),
            &FineTuneOptions {
                resume: true,
                ..first
            },
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("checkpoint.json"), "{err}");
}
