//! Calibration: the heads' temperatures, fitted only on scores of records
//! the fitted model did not see (out-of-bag logits, the calibration
//! slice), and P(tag right) for the tags.

use crate::bagging::BAG_MEMBERS;
use tomlite_models::Rows;
use tomlite_models::heads::Head;
use tomlite_models::metrics::{
    TagCalibration, fit_temperature_sigmoid, fit_temperature_softmax, sigmoid_t,
};

use crate::config::TrainConfig;
use crate::data::{TrainingData, affect_labels};
use crate::embed_cache::Embedded;
use crate::error::LearnError;
use crate::fit::{affect_mlp, curated_weight, repeated, repeated_rows};
use crate::split::is_calibration;
use tomlite_core::vocab::TOM_KINDS;

/// Per training example: whether its out-of-bag logits are an honest
/// held-out score for calibration. Only a record's own text counts (the
/// classifier scores records, not quotes), and after fine-tuning only the
/// records the encoder did not see.
pub(super) fn honest_rows(cfg: &TrainConfig, data: &TrainingData) -> Vec<bool> {
    let set = &data.train_set;
    (0..set.group.len())
        .map(|i| {
            let unseen =
                !cfg.tunes_encoder() || is_calibration(&data.train_records[set.group[i]].id);
            set.is_record(i) && unseen
        })
        .collect()
}

/// The honest rows ([`honest_rows`]) that have out-of-bag logits. A bag
/// trained on more rows than `honest` covers (the curated examples come
/// after the labeled ones) has out-of-bag logits for them too: those rows
/// are never calibration rows.
pub(super) fn oob_rows(honest: &[bool], oob: &[Option<Vec<f32>>]) -> Vec<usize> {
    (0..honest.len().min(oob.len()))
        .filter(|&i| honest[i] && oob[i].is_some())
        .collect()
}

/// Fits the tom_kind temperature on the bag's out-of-bag logits, then
/// P(tag right) from the two best kinds on the same rows.
pub(super) fn calibrate_tom(
    tom: &mut Head,
    oob: &[Option<Vec<f32>>],
    honest: &[bool],
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
) -> TagCalibration {
    let kinds = &data.train_set.kinds;
    let rows = oob_rows(honest, oob);
    let logits: Vec<Vec<f32>> = rows.iter().filter_map(|&i| oob[i].clone()).collect();
    let gold: Vec<Vec<bool>> = rows
        .iter()
        .map(|&i| {
            (0..TOM_KINDS.len())
                .map(|k| kinds[i].contains(&k))
                .collect()
        })
        .collect();
    tom.temperature = fit_temperature_sigmoid(&logits, &gold);
    let tag_rows: Vec<(Vec<f64>, Vec<usize>)> = rows
        .iter()
        .zip(&logits)
        .map(|(&i, z)| {
            let p = z.iter().map(|&v| sigmoid_t(v, tom.temperature)).collect();
            (p, kinds[i].clone())
        })
        .collect();
    let tag_calibration = TagCalibration::fit(&tag_rows);
    progress(&format!(
        "tag calibration: primary {:?}, secondary {:?}",
        tag_calibration
            .primary
            .map(|w| (w * 1000.0).round() / 1000.0),
        tag_calibration
            .secondary
            .map(|w| (w * 1000.0).round() / 1000.0)
    ));
    tag_calibration
}

/// Fits the intensity temperature on the bag's out-of-bag logits.
pub(super) fn calibrate_intensity(
    intensity: &mut Head,
    oob: &[Option<Vec<f32>>],
    honest: &[bool],
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
) {
    let rows = oob_rows(honest, oob);
    let logits: Vec<Vec<f32>> = rows.iter().filter_map(|&i| oob[i].clone()).collect();
    let gold: Vec<usize> = rows.iter().map(|&i| data.train_set.intensity[i]).collect();
    intensity.temperature = fit_temperature_softmax(&logits, &gold);
    progress(&format!(
        "calibration: out-of-bag logits of {} training records ({} members per bag)",
        rows.len(),
        BAG_MEMBERS
    ));
}

/// Fits the affect temperature on records no affect model saw: the
/// calibration slice ([`is_calibration`], also held out of fine-tuning) is
/// left out of a second affect MLP, trained like the first on everything
/// else, and the temperature is fitted on that MLP's logits of the slice's
/// records. The dev split stays out of it (it measures, it does not
/// tune), and so does GoEmotions dev: the temperature is for the records
/// the job annotates, whose labels are far less noisy than GoEmotions'
/// (the argmax, and so GoEmotions macro-F1, does not depend on it).
pub(super) fn calibrate_affect(
    cfg: &TrainConfig,
    affect: &mut Head,
    data: &TrainingData,
    embedded: &Embedded,
    progress: &mut dyn FnMut(&str),
) -> Result<(), LearnError> {
    let set = &data.train_set;
    let held = |i: usize| is_calibration(&data.train_records[set.group[i]].id);
    let (kept, slice): (Vec<usize>, Vec<usize>) = (0..set.texts.len()).partition(|&i| !held(i));
    // The slice's records themselves (not their quotes).
    let slice: Vec<usize> = slice.into_iter().filter(|&i| set.is_record(i)).collect();
    if slice.is_empty() || kept.is_empty() {
        return Ok(());
    }
    let dim = embedded.tom_train.dim();
    let rows_of = |idx: &[usize]| -> Result<Rows, LearnError> {
        let mut v = Vec::with_capacity(idx.len() * dim);
        for &i in idx {
            v.extend_from_slice(embedded.tom_train.row(i));
        }
        Ok(Rows::new(v, dim)?)
    };
    // Trained like the first: the curated affect examples too (they are
    // training rows, never calibration rows).
    let mut labels = affect_labels(&data.goemotions.train);
    labels.extend(kept.iter().map(|&i| set.affect[i]));
    let w = curated_weight(data);
    labels.extend(repeated(&data.curated_labels.affect, w));
    let without_slice = affect_mlp(
        cfg,
        &Rows::concat(&[
            &embedded.goemotions_train,
            &rows_of(&kept)?,
            &repeated_rows(&embedded.curated_affect, w)?,
        ])?,
        &labels,
        &mut |_, _| {},
    )?;
    let gold: Vec<usize> = slice.iter().map(|&i| set.affect[i]).collect();
    affect.temperature =
        fit_temperature_softmax(&without_slice.logits_rows(&rows_of(&slice)?)?, &gold);
    progress(&format!(
        "calibration: affect temperature on {} calibration-slice records left out of a second affect model",
        slice.len()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::oob_rows;

    #[test]
    fn curated_rows_after_the_labeled_ones_are_never_calibration_rows() {
        // Three labeled examples (the second a quote, not honest), then two
        // curated rows, all with out-of-bag logits.
        let honest = [true, false, true];
        let oob: Vec<Option<Vec<f32>>> = vec![
            Some(vec![0.1]),
            Some(vec![0.2]),
            Some(vec![0.3]),
            Some(vec![0.4]),
            Some(vec![0.5]),
        ];
        assert_eq!(oob_rows(&honest, &oob), [0, 2]);
        // A labeled row without out-of-bag logits is not one either.
        let oob = [None, Some(vec![0.2]), Some(vec![0.3]), Some(vec![0.4])];
        assert_eq!(oob_rows(&honest, &oob), [2]);
    }
}
