//! Heads: training on separable data, calibration, save/load round trip;
//! the data readers on the real GoEmotions splits.

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use tomlite_models::data::{goemotions_affect, is_dev, read_goemotions};
use tomlite_models::heads::{Card, Head, HeadCard, HeadSpec, Heads, Rng, Targets, TrainOptions};
use tomlite_models::metrics::{ece, fit_temperature_softmax, softmax_t};

/// Two Gaussian blobs per class in 8 dimensions.
fn blobs(n: usize, classes: usize, seed: u64) -> (Tensor, Vec<u32>) {
    let mut rng = Rng::new(seed);
    let mut x = Vec::new();
    let mut y = Vec::new();
    for i in 0..n {
        let c = i % classes;
        for d in 0..8 {
            let centre = if d % classes == c { 2.0 } else { 0.0 };
            x.push(centre + rng.uniform(0.8));
        }
        y.push(c as u32);
    }
    (Tensor::from_vec(x, (n, 8), &Device::Cpu).unwrap(), y)
}

fn spec(name: &str, n: usize, multi: bool, hidden: usize) -> HeadSpec {
    HeadSpec {
        wording_cues: false,
        name: name.into(),
        labels: (0..n).map(|i| format!("l{i}")).collect(),
        multi_label: multi,
        hidden,
    }
}

fn accuracy(head: &Head, x: &Tensor, y: &[u32]) -> f64 {
    let p = head.probabilities(x).unwrap();
    let ok = p
        .iter()
        .zip(y)
        .filter(|(row, g)| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .unwrap()
                .0
                == **g as usize
        })
        .count();
    ok as f64 / y.len() as f64
}

#[test]
fn heads_learn_separable_data_reproducibly_and_round_trip() {
    let (x, y) = blobs(600, 3, 1);
    let opts = TrainOptions {
        epochs: 20,
        batch_size: 64,
        ..Default::default()
    };
    let single = Targets::Single {
        labels: y.clone(),
        weights: vec![1.0; y.len()],
    };
    let mut losses = Vec::new();
    let mlp = Head::train(spec("affect", 3, false, 16), &x, &single, &opts, |_, l| {
        losses.push(l)
    })
    .unwrap();
    assert!(losses.last().unwrap() < &losses[0], "{losses:?}");
    let (xt, yt) = blobs(300, 3, 2);
    assert!(accuracy(&mlp, &xt, &yt) > 0.9);
    // Same seed, same data: the same head.
    let again = Head::train(spec("affect", 3, false, 16), &x, &single, &opts, |_, _| {}).unwrap();
    assert_eq!(
        mlp.probabilities(&xt).unwrap(),
        again.probabilities(&xt).unwrap()
    );

    let multi: Vec<Vec<f32>> = y
        .iter()
        .map(|&c| (0..3).map(|i| f32::from(i == c as usize)).collect())
        .collect();
    let tom = Head::train(
        spec("tom_kind", 3, true, 0),
        &x,
        &Targets::Multi(multi),
        &opts,
        |_, _| {},
    )
    .unwrap();
    let lin = Head::train(
        spec("intensity", 3, false, 0),
        &x,
        &single,
        &opts,
        |_, _| {},
    )
    .unwrap();
    assert!(accuracy(&tom, &xt, &yt) > 0.9);

    let mut person = lin.clone();
    person.spec.name = "person".into();
    person.temperature = 1.3;
    let card = Card {
        encoder_sha256: "e".into(),
        heads: [&tom, &mlp, &lin, &person]
            .iter()
            .map(|h| HeadCard {
                spec: h.spec.clone(),
                temperature: 1.0,
                metrics: serde_json::Value::Null,
            })
            .collect(),
        training_data: serde_json::Value::Null,
        training: serde_json::Value::Null,
        notes: serde_json::Value::Null,
        tag_calibration: None,
        edges: None,
    };
    // The sensitive head: in the card after the person head (or alone).
    let mut sensitive = lin.clone();
    sensitive.spec.name = "sensitive".into();
    sensitive.temperature = 0.8;
    let mut heads = Heads {
        tom_kind: tom,
        affect: mlp,
        intensity: lin,
        person: Some(person),
        sensitive: Some(sensitive),
        sensitive_lexical: Some(
            tomlite_models::lexical::Lexical::train(
                &["chemo starts on the 4th", "booked the tennis court"],
                &[true, false],
                &tomlite_models::lexical::LexicalOptions::default(),
            )
            .unwrap(),
        ),
        card,
    };
    heads.affect.temperature = 1.7;
    let dir = tempfile::tempdir().unwrap();
    heads.save(dir.path()).unwrap();
    let back = Heads::load(dir.path()).unwrap();
    assert_eq!(back.affect.temperature, 1.7);
    // The optional fourth head comes back under its own name.
    let p = back.person.as_ref().expect("person head saved and loaded");
    assert_eq!(p.temperature, 1.3);
    assert_eq!(
        p.probabilities(&xt).unwrap(),
        heads.person.as_ref().unwrap().probabilities(&xt).unwrap()
    );
    let sens = back
        .sensitive
        .as_ref()
        .expect("sensitive head saved and loaded");
    assert_eq!(sens.temperature, 0.8);
    assert_eq!(
        sens.probabilities(&xt).unwrap(),
        heads
            .sensitive
            .as_ref()
            .unwrap()
            .probabilities(&xt)
            .unwrap()
    );
    // The lexical model comes back whole (and is no head of the card).
    assert_eq!(back.sensitive_lexical, heads.sensitive_lexical);
    assert_eq!(back.card.heads.len(), 5);
    assert_eq!(back.card.heads[4].spec.name, "sensitive");
    // Without a person head the sensitive one still comes back by name.
    heads.person = None;
    heads.card.heads.truncate(3);
    let other = tempfile::tempdir().unwrap();
    heads.save(other.path()).unwrap();
    let back2 = Heads::load(other.path()).unwrap();
    assert!(back2.person.is_none());
    // Heads saved without a lexical model load without one.
    heads.sensitive_lexical = None;
    let third = tempfile::tempdir().unwrap();
    heads.save(third.path()).unwrap();
    assert!(
        Heads::load(third.path())
            .unwrap()
            .sensitive_lexical
            .is_none()
    );
    assert_eq!(back2.sensitive.as_ref().unwrap().temperature, 0.8);
    assert_eq!(
        back.affect.probabilities(&xt).unwrap(),
        heads.affect.probabilities(&xt).unwrap()
    );
    assert_eq!(
        back.tom_kind.probabilities(&xt).unwrap(),
        heads.tom_kind.probabilities(&xt).unwrap()
    );
}

#[test]
fn temperature_scaling_lowers_calibration_error_of_an_overfit_head() {
    // Noisy labels: 30 % flipped, so an unregularised head is overconfident.
    let (x, mut y) = blobs(400, 2, 3);
    let mut rng = Rng::new(9);
    for l in &mut y {
        if rng.next_u64() % 10 < 3 {
            *l = 1 - *l;
        }
    }
    let opts = TrainOptions {
        epochs: 200,
        weight_decay: 0.0,
        learning_rate: 1e-2,
        ..Default::default()
    };
    let single = Targets::Single {
        labels: y.clone(),
        weights: vec![1.0; y.len()],
    };
    let head = Head::train(spec("affect", 2, false, 64), &x, &single, &opts, |_, _| {}).unwrap();
    let (xd, mut yd) = blobs(400, 2, 4);
    for l in &mut yd {
        if rng.next_u64() % 10 < 3 {
            *l = 1 - *l;
        }
    }
    let logits = head.logits(&xd).unwrap().to_vec2::<f32>().unwrap();
    let gold: Vec<usize> = yd.iter().map(|&l| l as usize).collect();
    let t = fit_temperature_softmax(&logits, &gold);
    let conf_at = |t: f64| -> (Vec<f64>, Vec<bool>) {
        logits
            .iter()
            .zip(&gold)
            .map(|(z, &g)| {
                let p = softmax_t(z, t);
                let pred = usize::from(p[1] > p[0]);
                (p[pred], pred == g)
            })
            .unzip()
    };
    let (c1, ok1) = conf_at(1.0);
    let (ct, okt) = conf_at(t);
    assert!(ece(&ct, &okt, 10) <= ece(&c1, &ok1, 10), "t={t}");
}

fn goemotions(split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../data/goemotions/{split}.tsv"))
}

#[test]
fn goemotions_train_maps_to_the_documented_single_affect_counts() {
    let train = read_goemotions(&goemotions("train")).unwrap();
    // docs/labeling.md: 37,578 single-affect examples.
    assert_eq!(train.len(), 37_578);
    let count = |a: &str| train.iter().filter(|e| e.affect == a).count();
    assert_eq!(
        [
            count("neutral"),
            count("happy"),
            count("angry"),
            count("sad"),
            count("confused"),
            count("anxious")
        ],
        [13_065, 15_496, 5_128, 2_246, 1_073, 570]
    );
    assert_eq!(goemotions_affect("curiosity"), None);
    assert_eq!(goemotions_affect("relief"), Some("happy"));
}

#[test]
fn the_dev_split_is_about_fifteen_percent_and_stable() {
    let n = (0..10_000).filter(|i| is_dev(&format!("r-{i}"))).count();
    assert!((1_300..1_700).contains(&n), "{n}");
    assert_eq!(is_dev("ta-0001"), is_dev("ta-0001"));
}

#[test]
fn averaged_linear_heads_give_the_mean_of_their_logits() {
    let (x, y) = blobs(300, 3, 5);
    let single = Targets::Single {
        labels: y.clone(),
        weights: vec![1.0; y.len()],
    };
    let members: Vec<Head> = (0..3)
        .map(|seed| {
            let opts = TrainOptions {
                epochs: 3,
                batch_size: 32,
                seed,
                ..Default::default()
            };
            Head::train(
                spec("intensity", 3, false, 0),
                &x,
                &single,
                &opts,
                |_, _| {},
            )
            .unwrap()
        })
        .collect();
    let avg = Head::average(&members).unwrap();
    let (xt, _) = blobs(50, 3, 6);
    let got = avg.logits(&xt).unwrap().to_vec2::<f32>().unwrap();
    let each: Vec<Vec<Vec<f32>>> = members
        .iter()
        .map(|m| m.logits(&xt).unwrap().to_vec2::<f32>().unwrap())
        .collect();
    for (r, row) in got.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            let mean = each.iter().map(|m| m[r][c]).sum::<f32>() / 3.0;
            assert!((v - mean).abs() < 1e-4, "row {r} col {c}: {v} vs {mean}");
        }
    }
    // Members differ (different seeds), so the average is not one of them.
    assert_ne!(each[0], each[1]);
    // A head with a hidden layer cannot be averaged this way.
    let opts = TrainOptions {
        epochs: 1,
        ..Default::default()
    };
    let mlp = Head::train(
        spec("intensity", 3, false, 4),
        &x,
        &single,
        &opts,
        |_, _| {},
    )
    .unwrap();
    assert!(Head::average(&[mlp]).is_err());
    assert!(Head::average(&[]).is_err());
}

// A multi-label head that becomes sure of its data (logits far past ±17,
// where an f32 sigmoid is exactly 0 or 1) still has a finite loss: the
// loss is computed from the logits, not from the log of the sigmoid.
#[test]
fn a_multi_label_head_sure_of_its_data_keeps_a_finite_loss() {
    let (x, y) = blobs(64, 2, 3);
    let x = (x * 40.0).unwrap();
    let targets = Targets::Multi(
        y.iter()
            .map(|&c| vec![f32::from(c == 0), f32::from(c == 1)])
            .collect(),
    );
    let opts = TrainOptions {
        epochs: 60,
        batch_size: 64,
        learning_rate: 0.5,
        weight_decay: 0.0,
        ..Default::default()
    };
    let mut losses = Vec::new();
    let head = Head::train(spec("kinds", 2, true, 0), &x, &targets, &opts, |_, l| {
        losses.push(l)
    })
    .unwrap();
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(*losses.last().unwrap() < 1e-3, "{losses:?}");
    // The head is sure: some logit is far past where the sigmoid saturates.
    let z = head.logits(&x).unwrap().abs().unwrap().max_all().unwrap();
    assert!(z.to_scalar::<f32>().unwrap() > 40.0);
}

// A loss that is not a number stops training with an error naming the
// head and the epoch, instead of writing a head of NaNs.
#[test]
fn a_loss_that_is_not_a_number_stops_training_naming_the_head() {
    let (x, y) = blobs(16, 2, 4);
    let mut v: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    v[5] = f32::NAN;
    let x = Tensor::from_vec(v, (16, 8), &Device::Cpu).unwrap();
    let targets = Targets::Single {
        labels: y,
        weights: vec![1.0; 16],
    };
    let err = Head::train(
        spec("intensity", 2, false, 0),
        &x,
        &targets,
        &TrainOptions::default(),
        |_, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("intensity head diverged") && err.contains("epoch 1"),
        "{err}"
    );
}
