//! Bagged linear heads: members trained on bootstrap samples of records,
//! averaged, with honest out-of-bag logits for calibration; and the class
//! weights that keep rare labels from being drowned.
//!
//! The samples are drawn as plain rows ([`Rows`]); the models crate trains
//! and averages the members, so no tensor is built here.

use tomlite_models::heads::{Head, HeadSpec, Rng, Targets, TrainOptions};
use tomlite_models::{Error, Rows};

/// Members of the bagged linear heads.
pub const BAG_MEMBERS: usize = 9;

/// A linear head bagged over records, with its out-of-bag logits.
///
/// Each of [`BAG_MEMBERS`] members trains on a bootstrap sample of the
/// records (a record and its quotes drawn together) with its own seed; the
/// head is their weight average ([`Head::average`]: the mean of their
/// logits). Every record is left out by about a third of the members, and
/// the mean of those members' logits on it is an honest held-out score
/// from the training data alone: the temperature is fitted on these, not
/// on the dev split, which stays untouched for evaluation.
pub struct Bagged {
    /// The average of the members.
    pub head: Head,
    /// The members, each with which groups (records) its sample drew.
    pub members: Vec<(Head, Vec<bool>)>,
    /// Per example: mean logits of the members that did not see it, or
    /// `None` when every member saw it.
    pub oob: Vec<Option<Vec<f32>>>,
}

/// Trains a bagged head (see [`Bagged`]); `group[i]` is example `i`'s
/// record, drawn with its quotes; `on_epoch(member, epoch, loss)`.
pub fn train_bagged(
    spec: &HeadSpec,
    x: &Rows,
    targets: &Targets,
    group: &[usize],
    opts: &TrainOptions,
    mut on_epoch: impl FnMut(usize, usize, f64),
) -> Result<Bagged, Error> {
    let groups = group.iter().copied().max().map_or(0, |g| g + 1);
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); groups];
    for (i, &g) in group.iter().enumerate() {
        rows_of[g].push(i);
    }
    let mut rng = Rng::new(opts.seed ^ 0xBA66_ED00);
    let out = spec.labels.len();
    let mut oob_sum = vec![vec![0f32; out]; group.len()];
    let mut oob_n = vec![0usize; group.len()];
    let mut members = Vec::with_capacity(BAG_MEMBERS);
    for m in 0..BAG_MEMBERS {
        let mut drawn = vec![0usize; groups];
        for _ in 0..groups {
            drawn[(rng.next_u64() % groups as u64) as usize] += 1;
        }
        let rows: Vec<usize> = drawn
            .iter()
            .enumerate()
            .flat_map(|(g, &c)| std::iter::repeat_n(&rows_of[g], c).flatten().copied())
            .collect();
        let xb = select(x, &rows)?;
        let tb = match targets {
            Targets::Multi(t) => Targets::Multi(rows.iter().map(|&r| t[r].clone()).collect()),
            Targets::Single { labels, weights } => Targets::Single {
                labels: rows.iter().map(|&r| labels[r]).collect(),
                weights: rows.iter().map(|&r| weights[r]).collect(),
            },
        };
        let member_opts = TrainOptions {
            seed: opts.seed.wrapping_add(m as u64),
            ..opts.clone()
        };
        let head = Head::train(spec.clone(), &xb, &tb, &member_opts, |e, l| {
            on_epoch(m, e, l)
        })?;
        let left_out: Vec<usize> = (0..group.len()).filter(|&i| drawn[group[i]] == 0).collect();
        if !left_out.is_empty() {
            let z = head.logits_rows(&select(x, &left_out)?)?;
            for (&i, z) in left_out.iter().zip(z) {
                for (s, v) in oob_sum[i].iter_mut().zip(z) {
                    *s += v;
                }
                oob_n[i] += 1;
            }
        }
        members.push((head, drawn.iter().map(|&c| c > 0).collect()));
    }
    let oob = oob_sum
        .into_iter()
        .zip(oob_n)
        .map(|(s, n)| (n > 0).then(|| s.into_iter().map(|v| v / n as f32).collect()))
        .collect();
    let heads: Vec<Head> = members.iter().map(|(h, _)| h.clone()).collect();
    Ok(Bagged {
        head: Head::average(&heads)?,
        members,
        oob,
    })
}

/// The rows of `x` at `rows`, in that order (repeats included).
fn select(x: &Rows, rows: &[usize]) -> Result<Rows, Error> {
    let mut data = Vec::with_capacity(rows.len() * x.dim());
    for &r in rows {
        data.extend_from_slice(x.row(r));
    }
    Rows::new(data, x.dim())
}

/// Loss weight per example: inverse square root of its class frequency,
/// normalised to mean 1, so rare affects are not drowned by the common ones.
pub fn class_weights(labels: &[usize], n: usize) -> Vec<f32> {
    let mut count = vec![0usize; n];
    for &l in labels {
        count[l] += 1;
    }
    let w: Vec<f32> = count
        .iter()
        .map(|&c| if c == 0 { 0.0 } else { 1.0 / (c as f32).sqrt() })
        .collect();
    let mean = labels.iter().map(|&l| w[l]).sum::<f32>() / labels.len().max(1) as f32;
    labels.iter().map(|&l| w[l] / mean).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters of 2-d points, labelled by their cluster; records of
    /// one or two rows.
    fn sample() -> (Rows, Targets, Vec<usize>) {
        let mut seed = 7u64;
        let mut noise = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let mut vectors = Vec::new();
        let mut labels = Vec::new();
        for i in 0..24 {
            let label = (i % 2) as u32;
            let centre = if label == 0 { -1.0 } else { 1.0 };
            vectors.push(vec![centre + noise(), centre + noise()]);
            labels.push(label);
        }
        // Records 0..6 hold two rows each, records 6..18 one.
        let group: Vec<usize> = (0..24)
            .map(|i| if i < 12 { i / 2 } else { i - 6 })
            .collect();
        let weights = class_weights(&labels.iter().map(|&l| l as usize).collect::<Vec<_>>(), 2);
        let x = Rows::from_vectors(&vectors, 2).unwrap();
        (x, Targets::Single { labels, weights }, group)
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-5)
    }

    #[test]
    fn out_of_bag_logits_are_the_mean_of_the_members_that_never_drew_the_record() {
        let (x, targets, group) = sample();
        let spec = HeadSpec {
            name: "intensity".to_string(),
            labels: vec!["low".to_string(), "high".to_string()],
            multi_label: false,
            hidden: 0,
            wording_cues: false,
        };
        let opts = TrainOptions {
            epochs: 3,
            batch_size: 8,
            ..TrainOptions::default()
        };
        let mut epochs = 0;
        let bag = train_bagged(&spec, &x, &targets, &group, &opts, |_, _, _| epochs += 1).unwrap();
        assert_eq!(bag.members.len(), BAG_MEMBERS);
        assert_eq!(epochs, BAG_MEMBERS * opts.epochs);
        assert_eq!(bag.oob.len(), x.len());
        let member_logits: Vec<Vec<Vec<f32>>> = bag
            .members
            .iter()
            .map(|(head, _)| head.logits_rows(&x).unwrap())
            .collect();
        let mut scored = 0;
        for (i, oob) in bag.oob.iter().enumerate() {
            let unseen: Vec<usize> = (0..BAG_MEMBERS)
                .filter(|&m| !bag.members[m].1[group[i]])
                .collect();
            match oob {
                None => assert!(unseen.is_empty(), "row {i}: members {unseen:?} left it out"),
                Some(z) => {
                    assert!(!unseen.is_empty(), "row {i}: every member drew it");
                    let mean: Vec<f32> = (0..2)
                        .map(|k| {
                            unseen.iter().map(|&m| member_logits[m][i][k]).sum::<f32>()
                                / unseen.len() as f32
                        })
                        .collect();
                    assert!(close(z, &mean), "row {i}: {z:?} vs {mean:?}");
                    scored += 1;
                }
            }
        }
        // About a third of the members leave each record out.
        assert!(scored > x.len() / 2, "{scored} of {} rows scored", x.len());
        // The bagged head is the members' average.
        let heads: Vec<Head> = bag.members.iter().map(|(h, _)| h.clone()).collect();
        let average = Head::average(&heads).unwrap().logits_rows(&x).unwrap();
        for (a, b) in bag.head.logits_rows(&x).unwrap().iter().zip(&average) {
            assert!(close(a, b), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn rare_classes_weigh_more_and_the_weights_average_one() {
        let labels = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let w = class_weights(&labels, 3);
        // Inverse square roots of the counts: 1/3 and 1.
        assert!((w[9] / w[0] - 3.0).abs() < 1e-5, "{w:?}");
        let mean = w.iter().sum::<f32>() / w.len() as f32;
        assert!((mean - 1.0).abs() < 1e-6, "{mean}");
    }
}
