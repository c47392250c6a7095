//! The embeddings the heads are fitted on, computed in chunks with a
//! progress line, and cached between runs under the encoder's and the
//! texts' hash.

use std::path::Path;

use tomlite_models::cues::with_cues;
use tomlite_models::{Encoder, Rows};

use crate::data::{TrainingData, comment_texts, refs};
use crate::embedding::embed;
use crate::error::LearnError;

/// The embeddings the heads are trained, calibrated and measured on.
pub(super) struct Embedded {
    /// ToM-lite training examples (records and quotes).
    pub(super) tom_train: Rows,
    /// ToM-lite dev records.
    pub(super) tom_dev: Rows,
    /// The affect head's GoEmotions training comments.
    pub(super) goemotions_train: Rows,
    /// GoEmotions dev comments.
    pub(super) goemotions_dev: Rows,
    /// The curated affect examples (`CuratedLabels::affect_texts`).
    pub(super) curated_affect: Rows,
    /// The curated intensity examples (`CuratedLabels::intensity_texts`).
    pub(super) curated_intensity: Rows,
}

/// The ToM-lite rows with each text's wording cues appended
/// ([`tomlite_models::cues`]): what the intensity head reads.
pub(super) struct Cued {
    pub(super) tom_train: Rows,
    pub(super) tom_dev: Rows,
    /// The curated intensity examples, with their cues.
    pub(super) curated_intensity: Rows,
}

impl Embedded {
    pub(super) fn with_cues(&self, data: &TrainingData) -> Result<Cued, LearnError> {
        Ok(Cued {
            tom_train: with_cues(&self.tom_train, &refs(&data.train_set.texts))?,
            tom_dev: with_cues(&self.tom_dev, &refs(&data.dev_set.texts))?,
            curated_intensity: with_cues(
                &self.curated_intensity,
                &refs(&data.curated_labels.intensity_texts),
            )?,
        })
    }
}

pub(super) fn embed_sets(
    encoder: &Encoder,
    data: &TrainingData,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Embedded, LearnError> {
    let train_texts = refs(&data.train_set.texts);
    let dev_texts = refs(&data.dev_set.texts);
    let (curated_affect, curated_intensity) = embed_curated(encoder, data, cache, progress)?;
    Ok(Embedded {
        curated_affect,
        curated_intensity,
        tom_train: embed(encoder, &train_texts, "ToM-lite train", cache, progress)?,
        tom_dev: embed(encoder, &dev_texts, "ToM-lite dev", cache, progress)?,
        goemotions_train: embed(
            encoder,
            &comment_texts(&data.goemotions.train),
            "GoEmotions train",
            cache,
            progress,
        )?,
        goemotions_dev: embed(
            encoder,
            &comment_texts(&data.goemotions.dev),
            "GoEmotions dev",
            cache,
            progress,
        )?,
    })
}

/// The curated affect and intensity examples' embeddings: their texts
/// (mostly the same) are embedded once.
fn embed_curated(
    encoder: &Encoder,
    data: &TrainingData,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<(Rows, Rows), LearnError> {
    let c = &data.curated_labels;
    let mut unique: Vec<&str> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = Default::default();
    for t in c.affect_texts.iter().chain(&c.intensity_texts) {
        index.entry(t.as_str()).or_insert_with(|| {
            unique.push(t.as_str());
            unique.len() - 1
        });
    }
    let x = if unique.is_empty() {
        Rows::new(Vec::new(), encoder.dim())?
    } else {
        embed(
            encoder,
            &unique,
            "curated affect and intensity",
            cache,
            progress,
        )?
    };
    let pick = |texts: &[String]| -> Result<Rows, LearnError> {
        let mut v = Vec::with_capacity(texts.len() * x.dim());
        for t in texts {
            v.extend_from_slice(x.row(index[t.as_str()]));
        }
        Ok(Rows::new(v, x.dim())?)
    };
    Ok((pick(&c.affect_texts)?, pick(&c.intensity_texts)?))
}
