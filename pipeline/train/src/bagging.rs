//! Bagged linear heads: members trained on bootstrap samples of records,
//! averaged, with honest out-of-bag logits for calibration; and the class
//! weights that keep rare labels from being drowned.

use candle_core::Tensor;

use tomlite_models::Error;
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::rows::HeadInput;

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
    x: &(impl HeadInput + ?Sized),
    targets: &Targets,
    group: &[usize],
    opts: &TrainOptions,
    mut on_epoch: impl FnMut(usize, usize, f64),
) -> Result<Bagged, Error> {
    let x = &x.tensor()?;
    let groups = group.iter().copied().max().map_or(0, |g| g + 1);
    let mut rows_of: Vec<Vec<u32>> = vec![Vec::new(); groups];
    for (i, &g) in group.iter().enumerate() {
        rows_of[g].push(i as u32);
    }
    let mut rng = tomlite_models::heads::Rng::new(opts.seed ^ 0xBA66_ED00);
    let out = spec.labels.len();
    let mut oob_sum = vec![vec![0f32; out]; group.len()];
    let mut oob_n = vec![0usize; group.len()];
    let mut members = Vec::with_capacity(BAG_MEMBERS);
    for m in 0..BAG_MEMBERS {
        let mut drawn = vec![0usize; groups];
        for _ in 0..groups {
            drawn[(rng.next_u64() % groups as u64) as usize] += 1;
        }
        let rows: Vec<u32> = drawn
            .iter()
            .enumerate()
            .flat_map(|(g, &c)| std::iter::repeat_n(&rows_of[g], c).flatten().copied())
            .collect();
        let idx = Tensor::from_vec(rows.clone(), rows.len(), x.device())?;
        let xb = x.index_select(&idx, 0)?;
        let tb = match targets {
            Targets::Multi(t) => {
                Targets::Multi(rows.iter().map(|&r| t[r as usize].clone()).collect())
            }
            Targets::Single { labels, weights } => Targets::Single {
                labels: rows.iter().map(|&r| labels[r as usize]).collect(),
                weights: rows.iter().map(|&r| weights[r as usize]).collect(),
            },
        };
        let member_opts = TrainOptions {
            seed: opts.seed.wrapping_add(m as u64),
            ..opts.clone()
        };
        let head = Head::train(spec.clone(), &xb, &tb, &member_opts, |e, l| {
            on_epoch(m, e, l)
        })?;
        let left_out: Vec<u32> = (0..group.len() as u32)
            .filter(|&i| drawn[group[i as usize]] == 0)
            .collect();
        if !left_out.is_empty() {
            let idx = Tensor::from_vec(left_out.clone(), left_out.len(), x.device())?;
            let z = head.logits_rows(&x.index_select(&idx, 0)?)?;
            for (&i, z) in left_out.iter().zip(z) {
                for (s, v) in oob_sum[i as usize].iter_mut().zip(z) {
                    *s += v;
                }
                oob_n[i as usize] += 1;
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
