//! Fitting the heads on the embeddings: tom_kind and intensity bagged,
//! affect an MLP, and the edge and sensitive models.

use std::path::Path;

use crate::bagging::{Bagged, class_weights, train_bagged};
use tomlite_models::data::{LabeledRecord, SensitivityRecord};
use tomlite_models::heads::{Head, HeadSpec, Targets, TrainOptions};
use tomlite_models::metrics::TagCalibration;
use tomlite_models::{Encoder, Rows};

use crate::config::TrainConfig;
use crate::curated_edges::{PrepareInputs, prepare};
use crate::data::{TrainingData, affect_labels, multi_hot, refs};
use crate::edges::{EdgeModel, EdgeTraining, train_edges};
use crate::embed_cache::{Cued, Embedded};
use crate::embedding::embed;
use crate::error::LearnError;
use crate::sensitive::{Trained, may_be_sensitive, train_head};
use crate::sensitive_cache;
use crate::split::is_calibration;
use tomlite_core::graph::nodes::Registry;
use tomlite_core::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// Per head and epoch, the training loss: one entry per bagged member.
pub(super) type EpochLosses = Vec<(String, usize, f64)>;

/// tom_kind: multi-label, bagged, on the ToM-lite texts and gold quotes
/// and the curated examples.
pub(super) fn train_tom_head(
    encoder: &Encoder,
    data: &TrainingData,
    embedded: &Embedded,
    cache: Option<&Path>,
    small: &TrainOptions,
    losses: &mut EpochLosses,
    progress: &mut dyn FnMut(&str),
) -> Result<Bagged, LearnError> {
    let weight = curated_weight(data);
    let spec = HeadSpec {
        wording_cues: false,
        name: "tom_kind".into(),
        labels: TOM_KINDS.iter().map(|s| s.to_string()).collect(),
        multi_label: true,
        hidden: 0,
    };
    let (train_set, curated) = (&data.train_set, &data.curated);
    let mut targets = multi_hot(&train_set.kinds, TOM_KINDS.len());
    let mut group = train_set.group.clone();
    let embeddings = if curated.texts.is_empty() {
        embedded.tom_train.clone()
    } else {
        progress(&format!(
            "curated: {} decisions give {} tom_kind examples, each {} training rows ({:?})",
            data.curated_decisions,
            curated.texts.len(),
            weight,
            curated.stats
        ));
        let curated_x = embed(encoder, &refs(&curated.texts), "curated", cache, progress)?;
        let offset = train_set.group.iter().max().map_or(0, |g| g + 1);
        let w = weight;
        targets.extend(repeated(&curated.targets, w));
        group.extend(repeated(&curated.group, w).map(|g| g + offset));
        Rows::concat(&[&embedded.tom_train, &repeated_rows(&curated_x, w)?])?
    };
    Ok(train_bagged(
        &spec,
        &embeddings,
        &Targets::Multi(targets),
        &group,
        small,
        |_, e, l| losses.push(("tom_kind".to_string(), e, l)),
    )?)
}

/// affect: an MLP on GoEmotions train plus the ToM-lite train records
/// and the curated affect examples, class-weighted.
pub(super) fn train_affect_head(
    cfg: &TrainConfig,
    data: &TrainingData,
    embedded: &Embedded,
    losses: &mut EpochLosses,
    progress: &mut dyn FnMut(&str),
) -> Result<Head, LearnError> {
    let curated = &data.curated_labels;
    if data.curated_decisions > 0 {
        progress(&format!(
            "curated: {} affect examples, each {} training rows (the curator's affect, else the annotated one; not usable: {})",
            curated.affect.len(),
            curated_weight(data),
            curated.not_usable.get("affect").copied().unwrap_or(0)
        ));
    }
    let w = curated_weight(data);
    let embeddings = Rows::concat(&[
        &embedded.goemotions_train,
        &embedded.tom_train,
        &repeated_rows(&embedded.curated_affect, w)?,
    ])?;
    let mut labels = affect_labels(&data.goemotions.train);
    labels.extend(&data.train_set.affect);
    labels.extend(repeated(&curated.affect, w));
    affect_mlp(cfg, &embeddings, &labels, &mut |e, l| {
        losses.push(("affect".to_string(), e, l))
    })
}

/// The affect MLP on `embeddings` and their `labels`, class-weighted.
pub(super) fn affect_mlp(
    cfg: &TrainConfig,
    embeddings: &Rows,
    labels: &[usize],
    loss: &mut dyn FnMut(usize, f64),
) -> Result<Head, LearnError> {
    let spec = HeadSpec {
        wording_cues: false,
        name: "affect".into(),
        labels: AFFECTS.iter().map(|s| s.to_string()).collect(),
        multi_label: false,
        hidden: 512,
    };
    Ok(Head::train(
        spec,
        embeddings,
        &Targets::Single {
            labels: labels.iter().map(|&l| l as u32).collect(),
            weights: class_weights(labels, AFFECTS.len()),
        },
        // The MLP overfits GoEmotions past a few passes (train loss 0.28 and
        // a calibration temperature of 2.0 after 30): a quarter of the passes.
        &TrainOptions {
            batch_size: 256,
            epochs: cfg.options.epochs.div_ceil(4),
            ..cfg.options.clone()
        },
        loss,
    )?)
}

/// intensity: bagged, on the ToM-lite training examples and then the
/// curated intensity examples (`cued`: their embeddings with the wording
/// cues). The curated rows come after the ToM-lite ones, so the out-of-bag
/// logits of the first `train_set.texts.len()` rows are the ToM-lite
/// examples' ([`crate::calibrate::oob_rows`] reads only those).
pub(super) fn train_intensity_head(
    data: &TrainingData,
    cued: &Cued,
    small: &TrainOptions,
    losses: &mut EpochLosses,
    progress: &mut dyn FnMut(&str),
) -> Result<Bagged, LearnError> {
    let curated = &data.curated_labels;
    if data.curated_decisions > 0 {
        progress(&format!(
            "curated: {} intensity examples, each {} training rows (the curator's intensity, else the annotated one; not usable: {})",
            curated.intensity.len(),
            curated_weight(data),
            curated.not_usable.get("intensity").copied().unwrap_or(0)
        ));
    }
    let w = curated_weight(data);
    let x = Rows::concat(&[&cued.tom_train, &repeated_rows(&cued.curated_intensity, w)?])?;
    let mut labels = data.train_set.intensity.clone();
    labels.extend(repeated(&curated.intensity, w));
    let offset = data.train_set.group.iter().max().map_or(0, |g| g + 1);
    let mut group = data.train_set.group.clone();
    group.extend(repeated(&curated.intensity_group, w).map(|g| g + offset));
    let spec = HeadSpec {
        wording_cues: true,
        name: "intensity".into(),
        labels: INTENSITIES.iter().map(|s| s.to_string()).collect(),
        multi_label: false,
        hidden: 0,
    };
    Ok(train_bagged(
        &spec,
        &x,
        &Targets::Single {
            labels: labels.iter().map(|&l| l as u32).collect(),
            weights: class_weights(&labels, INTENSITIES.len()),
        },
        &group,
        small,
        |_, e, l| losses.push(("intensity".to_string(), e, l)),
    )?)
}

/// How many rows each curated example counts for (at least one).
pub(super) fn curated_weight(data: &TrainingData) -> usize {
    data.curated_weight.max(1)
}

/// `items` `w` times over, in order: `w` copies of each curated example.
/// A bagged head resamples by group, so every copy of an example shares
/// its group and is in or out of a bag together.
pub(super) fn repeated<T: Clone>(items: &[T], w: usize) -> impl Iterator<Item = T> + '_ {
    (0..w).flat_map(move |_| items.iter().cloned())
}

/// `rows` `w` times over, in the order of [`repeated`].
pub(super) fn repeated_rows(rows: &Rows, w: usize) -> Result<Rows, LearnError> {
    Ok(Rows::concat(&vec![rows; w])?)
}

/// One line per head and epoch; a bagged head's loss is its members' mean.
pub(super) fn report_epoch_losses(losses: &EpochLosses, progress: &mut dyn FnMut(&str)) {
    // (head, epoch, sum of the losses, members)
    let mut per_epoch: Vec<(String, usize, f64, usize)> = Vec::new();
    for (name, epoch, loss) in losses {
        match per_epoch
            .iter_mut()
            .find(|(n, e, _, _)| n == name && e == epoch)
        {
            Some(entry) => {
                entry.2 += loss;
                entry.3 += 1;
            }
            None => per_epoch.push((name.clone(), *epoch, *loss, 1)),
        }
    }
    for (name, epoch, sum, members) in &per_epoch {
        let bag = if *members > 1 {
            format!(" (mean of {members} bagged members)")
        } else {
            String::new()
        };
        progress(&format!(
            "{name}: epoch {epoch:>3} loss {:.4}{bag}",
            sum / *members as f64
        ));
    }
}

/// The tom_kind head with its bag's members and out-of-bag logits.
pub(super) struct TomBag<'a> {
    pub(super) head: &'a Head,
    pub(super) members: &'a [(Head, Vec<bool>)],
    pub(super) oob: &'a [Option<Vec<f32>>],
}

/// Edges: the person head and the edge calibrations, on the training
/// records, with every labeled record as the memory pool.
pub(super) fn train_edge_model(
    cfg: &TrainConfig,
    encoder: &Encoder,
    data: &TrainingData,
    tom: &TomBag<'_>,
    tag_calibration: &TagCalibration,
    small: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<EdgeModel, LearnError> {
    let registry = match &cfg.nodes {
        Some(p) => Some(Registry::load(p).map_err(|e| LearnError::Nodes(Box::new(e)))?),
        None => None,
    };
    let records = &data.train_records;
    let pool: Vec<LabeledRecord> = records.iter().chain(&data.dev_records).cloned().collect();
    let pool_texts: Vec<&str> = pool.iter().map(|r| r.text.as_str()).collect();
    let cache = cfg.cache.as_deref();
    let pool_x = embed(encoder, &pool_texts, "memory pool", cache, progress)?;
    // Each record's first example is its own text.
    let mut first_example = vec![None; records.len()];
    for (i, &g) in data.train_set.group.iter().enumerate() {
        if first_example[g].is_none() {
            first_example[g] = Some(i);
        }
    }
    // Only the records whose people were labeled teach the person and
    // edge heads (every record stays in the memory pool).
    let (records, record_oob): (Vec<LabeledRecord>, Vec<Option<Vec<f32>>>) = records
        .iter()
        .zip(&first_example)
        .filter(|(r, _)| r.gold.people_labeled)
        .map(|(r, i)| (r.clone(), i.and_then(|i| tom.oob[i].clone())))
        .unzip();
    let curated = prepare(
        &data.curated_edges,
        &PrepareInputs {
            encoder,
            tom: tom.head,
            members: tom.members,
            group_offset: data.train_set.group.iter().max().map_or(0, |g| g + 1),
            staging: cfg.curated.as_deref(),
            registry: registry.as_ref(),
            cache,
        },
        progress,
    )?;
    train_edges(
        &EdgeTraining {
            encoder,
            records: &records,
            pool: &pool,
            pool_x: &pool_x,
            registry: registry.as_ref(),
            tom: tom.head,
            members: tom.members,
            record_oob: &record_oob,
            tag_calibration,
            cache,
            curated: &curated,
        },
        small,
        progress,
    )
}

/// The sensitive head, with the ToM-lite records that have no sensitive
/// word as its weak negatives; `None` without sensitivity data.
pub(super) fn train_sensitive_head(
    cfg: &TrainConfig,
    encoder: &Encoder,
    data: &TrainingData,
    small: &TrainOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Trained>, LearnError> {
    let ordinary: Vec<&str> = data
        .train_records
        .iter()
        .map(|r| r.text.as_str())
        .filter(|t| !may_be_sensitive(t))
        .collect();
    let source = cfg
        .sensitivity_files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let inputs = sensitive_cache::Inputs {
        encoder,
        records: &data.sensitivity,
        negatives: &ordinary,
        tunes_encoder: cfg.tunes_encoder(),
        source: &source,
        opts: small,
    };
    let cached = cfg
        .cache
        .as_deref()
        .and_then(|dir| Some((dir, sensitive_cache::entry(dir, &inputs)?)));
    if let Some((_, entry)) = &cached
        && let Some(trained) = sensitive_cache::read(entry)
    {
        progress(&format!(
            "sensitive head and lexical model: read from the cache {} (this build, the same encoder, sensitivity data and ordinary memories)",
            entry.path().display()
        ));
        return Ok(Some(trained));
    }
    let trained = train_head(
        encoder,
        &data.sensitivity,
        &ordinary,
        // After fine-tuning, only the records the encoder did not see
        // give honest out-of-bag scores for the temperature.
        &|r: &SensitivityRecord| !cfg.tunes_encoder() || is_calibration(&r.id),
        &source,
        small,
        progress,
    )?;
    if let (Some((dir, entry)), Some(t)) = (&cached, &trained) {
        sensitive_cache::write(dir, entry, t)?;
    }
    Ok(trained)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curated_copies_follow_each_other_and_keep_their_group() {
        let group = [4usize, 4, 9];
        let copies: Vec<usize> = repeated(&group, 3).collect();
        assert_eq!(copies, [4, 4, 9, 4, 4, 9, 4, 4, 9]);
        let rows = Rows::new(vec![1.0, 2.0, 3.0, 4.0], 2).unwrap();
        let r = repeated_rows(&rows, 2).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r.row(2), rows.row(0));
        assert_eq!(r.row(3), rows.row(1));
        // Weight 1 is the rows themselves.
        assert_eq!(repeated_rows(&rows, 1).unwrap().row(1), rows.row(1));
    }
}
