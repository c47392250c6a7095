//! The examples of a run: checked against the heads and options, and cut
//! into each epoch's batches of similar length.

use super::{Example, FineTuneOptions, HeadSpecs};
use crate::Error;
use crate::heads::Rng;

/// Batches per window of a shuffled epoch: examples whose lengths are
/// close share a batch, so padding is short.
pub(super) const BUCKET_BATCHES: usize = 32;

/// Whether an example trains affect only (a GoEmotions comment).
pub(super) fn is_affect_only(e: &Example) -> bool {
    e.tom_kind.is_none() && e.intensity.is_none() && e.sensitive.is_none()
}

/// One epoch's batches of the examples `members` (indices into
/// `lengths`): shuffled, cut into windows of [`BUCKET_BATCHES`] batches,
/// each window sorted by token count (stable) and cut into batches, then
/// the batches shuffled. Every batch but the last of the last window is
/// full, so an epoch has `ceil(members / batch_size)` steps; the order
/// depends on the generator only.
pub(super) fn epoch_batches(
    members: &[usize],
    lengths: &[usize],
    batch_size: usize,
    rng: &mut Rng,
) -> Vec<Vec<usize>> {
    let mut order = members.to_vec();
    rng.shuffle(&mut order);
    let mut batches: Vec<Vec<usize>> = Vec::with_capacity(order.len().div_ceil(batch_size));
    for window in order.chunks_mut(batch_size * BUCKET_BATCHES) {
        window.sort_by_key(|&i| lengths[i]);
        batches.extend(window.chunks(batch_size).map(<[usize]>::to_vec));
    }
    rng.shuffle(&mut batches);
    batches
}

pub(super) fn validate(
    examples: &[Example],
    specs: &HeadSpecs,
    opts: &FineTuneOptions,
) -> Result<(), Error> {
    let bad = |reason: String| Err(Error::InvalidOptions { reason });
    if opts.batch_size == 0 || opts.epochs == 0 {
        return bad("batch_size and epochs must be at least 1".into());
    }
    if examples.is_empty() {
        return bad("no training examples".into());
    }
    if !specs.tom_kind.multi_label || specs.affect.multi_label || specs.intensity.multi_label {
        return bad("tom_kind must be multi-label, affect and intensity single-label".into());
    }
    let kinds = specs.tom_kind.labels.len();
    for (i, e) in examples.iter().enumerate() {
        if let Some(t) = &e.tom_kind
            && (t.len() != kinds || t.iter().any(|&v| !(v == -1.0 || (0.0..=1.0).contains(&v))))
        {
            return bad(format!(
                "example {i}: tom_kind needs {kinds} values of 0..1 or -1, got {t:?}"
            ));
        }
        for (field, v, spec) in [
            ("affect", e.affect, &specs.affect),
            ("intensity", e.intensity, &specs.intensity),
        ] {
            if let Some(v) = v
                && v as usize >= spec.labels.len()
            {
                return bad(format!(
                    "example {i}: {field} label {v} is past the {} labels",
                    spec.labels.len()
                ));
            }
        }
        if let Some(v) = e.sensitive {
            match &specs.sensitive {
                None => {
                    return bad(format!(
                        "example {i}: a sensitive label for a run without a sensitive head"
                    ));
                }
                Some(spec) if v as usize >= spec.labels.len() => {
                    return bad(format!(
                        "example {i}: sensitive label {v} is past the {} labels",
                        spec.labels.len()
                    ));
                }
                Some(_) => {}
            }
        }
    }
    for (field, w, spec) in [
        ("affect", &opts.affect_class_weights, &specs.affect),
        ("intensity", &opts.intensity_class_weights, &specs.intensity),
    ] {
        if !w.is_empty() && w.len() != spec.labels.len() {
            return bad(format!(
                "{field}_class_weights has {} values for {} labels",
                w.len(),
                spec.labels.len()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bucketing by length must still visit every example once per epoch,
    // in full batches, in an order fixed by the seed.
    #[test]
    fn epoch_batches_cover_every_example_once_in_full_batches_of_similar_length() {
        let lengths: Vec<usize> = (0..1000).map(|i| (i * 7919) % 97 + 3).collect();
        let all: Vec<usize> = (0..1000).collect();
        let batches = epoch_batches(&all, &lengths, 16, &mut Rng::new(3));
        assert_eq!(batches.len(), 1000usize.div_ceil(16));
        assert_eq!(batches.iter().filter(|b| b.len() != 16).count(), 1);
        let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..1000).collect::<Vec<_>>());
        let padding = |bs: &[Vec<usize>]| -> usize {
            bs.iter()
                .map(|b| {
                    let max = b.iter().map(|&i| lengths[i]).max().unwrap_or(0);
                    b.iter().map(|&i| max - lengths[i]).sum::<usize>()
                })
                .sum()
        };
        let mut order: Vec<usize> = (0..1000).collect();
        Rng::new(3).shuffle(&mut order);
        let plain: Vec<Vec<usize>> = order.chunks(16).map(<[usize]>::to_vec).collect();
        assert!(padding(&batches) * 4 < padding(&plain));
        assert_eq!(batches, epoch_batches(&all, &lengths, 16, &mut Rng::new(3)));
        assert_ne!(batches, epoch_batches(&all, &lengths, 16, &mut Rng::new(4)));
        // A subset: each member once, nothing else.
        let odd: Vec<usize> = (0..1000).filter(|i| i % 2 == 1).collect();
        let mut seen: Vec<usize> = epoch_batches(&odd, &lengths, 16, &mut Rng::new(3))
            .into_iter()
            .flatten()
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, odd);
    }
}
