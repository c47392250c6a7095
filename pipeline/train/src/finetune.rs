//! The fine-tuning glue: which examples, heads and options the models
//! crate's [`FineTuner`] is given, the adapters it saves beside the heads,
//! and the reuse of an earlier run's adapters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bagging::class_weights;
use serde_json::json;
use tomlite_models::data::{AffectExample, LabeledRecord, SensitivityRecord};
use tomlite_models::finetune::{Example, FineTuneOptions, FineTuner, HeadSpecs, Progress};
use tomlite_models::heads::HeadSpec;

use crate::config::{CHECKPOINT_DIR, FineTuneConfig, TrainConfig};
use crate::data::{CuratedSet, TomSet, TrainingData, index_of, multi_hot};
use crate::error::LearnError;
use crate::split::{HELD_OUT_STYLES, is_calibration};
use tomlite_core::vocab::{AFFECTS, INTENSITIES, TOM_KINDS};

/// What fine-tuning trains on.
pub(super) struct FineTuneData<'a> {
    pub(super) records: &'a [LabeledRecord],
    pub(super) tr: &'a TomSet,
    pub(super) cur: &'a CuratedSet,
    pub(super) goemotions: &'a [AffectExample],
    /// Records labeled for sensitive content (all of them: the held-out
    /// styles and the calibration slice are left out here).
    pub(super) sensitivity: &'a [SensitivityRecord],
    pub(super) data_hashes: &'a BTreeMap<String, String>,
}

/// The adapters a fine-tuning run saved.
pub(super) struct FineTunedInfo {
    /// sha256 of the adapters file.
    pub(super) sha256: String,
    /// What the heads' card says of the run.
    pub(super) summary: serde_json::Value,
}

/// Fine-tunes the encoder when `cfg` asks for it; otherwise removes the
/// adapters an earlier fine-tuning run left in the output folder.
pub(super) fn finetune_or_clear(
    cfg: &TrainConfig,
    data: &TrainingData,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(&Progress),
) -> Result<Option<FineTunedInfo>, LearnError> {
    if let Some(ft) = &cfg.finetune {
        let inputs = FineTuneData {
            records: &data.train_records,
            tr: &data.train_set,
            cur: &data.curated,
            goemotions: &data.goemotions.for_finetuning,
            sensitivity: &data.sensitivity,
            data_hashes: &data.data_hashes,
        };
        return finetune(cfg, ft, &inputs, progress, steps).map(Some);
    }
    if let Some(from) = &cfg.adapters_from {
        return reuse_adapters(from, &cfg.heads_dir, progress).map(Some);
    }
    // Adapters left in the folder by a fine-tuning run belong to other
    // heads than the ones written here: the classifier would refuse the
    // pair.
    for f in [
        tomlite_models::finetune::ADAPTERS_FILE,
        tomlite_models::finetune::ADAPTERS_CARD_FILE,
    ] {
        let p = cfg.heads_dir.join(f);
        if p.is_file() {
            std::fs::remove_file(&p).map_err(|source| LearnError::Remove {
                path: p.clone(),
                source,
            })?;
            progress(&format!(
                "removed {} (adapters of earlier heads; these are trained without)",
                p.display()
            ));
        }
    }
    Ok(None)
}

/// Fine-tunes the encoder's adapters with the three heads (models crate),
/// checkpointing each epoch into `<heads_dir>/checkpoint`, and saves the
/// adapters and their card into the heads directory.
pub(super) fn finetune(
    cfg: &TrainConfig,
    ft: &FineTuneConfig,
    data: &FineTuneData<'_>,
    progress: &mut dyn FnMut(&str),
    steps: &mut dyn FnMut(&Progress),
) -> Result<FineTunedInfo, LearnError> {
    let started = std::time::Instant::now();
    let tuner = FineTuner::load(&cfg.model_dir)?;
    let examples = finetune_examples(data);
    let count = |f: fn(&Example) -> bool| examples.iter().filter(|e| f(e)).count();
    let specs = finetune_specs(&examples);
    let checkpoint_dir = cfg.heads_dir.join(CHECKPOINT_DIR);
    let resumable = checkpoint_dir
        .join(tomlite_models::finetune::CHECKPOINT_STATE_FILE)
        .is_file();
    let opts = finetune_options(ft, &examples, &specs, checkpoint_dir);
    let goemotions = count(|e| e.tom_kind.is_none() && e.sensitive.is_none());
    let per_epoch = examples.len() - goemotions + ft.goemotions.min(goemotions);
    progress(&format!(
        "fine-tuning {} (per epoch {per_epoch} examples: {} records, {} sentences, {} sensitivity examples, {} of {goemotions} GoEmotions drawn afresh; {} epochs of {} steps, LoRA rank {}, similarity weight {}, seed {}{})",
        cfg.model_dir.display(),
        count(|e| e.intensity.is_some()),
        count(|e| e.tom_kind.is_some() && e.intensity.is_none()),
        count(|e| e.sensitive.is_some()),
        ft.goemotions.min(goemotions),
        opts.epochs,
        per_epoch.div_ceil(opts.batch_size),
        opts.lora.rank,
        opts.similarity_weight,
        opts.seed,
        match (ft.resume, resumable) {
            (true, true) => ", resuming from its checkpoint",
            (true, false) => ", --resume: no checkpoint yet, from the start",
            _ => "",
        },
    ));
    let tuned = tuner.train(&examples, &specs, &opts, steps)?;
    let seconds = started.elapsed().as_secs_f64();
    let figures = json!({
        "epoch_losses": tuned.epoch_losses,
        "train_seconds": (seconds * 10.0).round() / 10.0,
        "examples_per_epoch": per_epoch,
        "record_examples": count(|e| e.intensity.is_some()),
        "sentence_examples": count(|e| e.tom_kind.is_some() && e.intensity.is_none()),
        "sensitivity_examples": count(|e| e.sensitive.is_some()),
        "goemotions_per_epoch": ft.goemotions.min(goemotions),
        "goemotions_pool": goemotions,
        "similarity_weight": opts.similarity_weight,
        "calibration_records_held_back": data.records.iter().filter(|r| is_calibration(&r.id)).count(),
        "held_out_styles": HELD_OUT_STYLES,
    });
    let card = tuned.card(json!({"files": data.data_hashes}), figures.clone());
    let sha256 = tuned.save(&cfg.heads_dir, &card)?;
    progress(&format!(
        "adapters written to {} (sha256 {}), {:.0}s",
        cfg.heads_dir.display(),
        &sha256[..12],
        seconds
    ));
    Ok(FineTunedInfo {
        summary: json!({
            "adapters_sha256": sha256,
            "seed": opts.seed,
            "epochs": opts.epochs,
            "lora": opts.lora,
            "figures": figures,
        }),
        sha256,
    })
}

/// The fine-tuning examples: each training record (all three heads) and
/// its gold quotes (tom_kind), except the calibration slice
/// ([`is_calibration`]); the curated decisions (tom_kind); every GoEmotions
/// train comment (affect only: the fine-tuning draws its share of them
/// afresh each epoch).
pub(super) fn finetune_examples(data: &FineTuneData<'_>) -> Vec<Example> {
    let kinds = TOM_KINDS.len();
    let tr = data.tr;
    let mut out = Vec::with_capacity(tr.texts.len() + data.cur.texts.len() + data.goemotions.len());
    let targets = multi_hot(&tr.kinds, kinds);
    for (i, text) in tr.texts.iter().enumerate() {
        let g = tr.group[i];
        if is_calibration(&data.records[g].id) {
            continue;
        }
        out.push(if tr.is_record(i) {
            let mut e = Example::record(
                text.clone(),
                targets[i].clone(),
                tr.affect[i] as u32,
                tr.intensity[i] as u32,
            );
            // An ordinary memory is a weak negative of the sensitive head.
            if !data.sensitivity.is_empty() && !crate::sensitive::may_be_sensitive(text) {
                e.sensitive = Some(0);
            }
            e
        } else {
            Example::sentence(text.clone(), targets[i].clone())
        });
    }
    for (text, t) in data.cur.texts.iter().zip(&data.cur.targets) {
        out.push(Example::sentence(text.clone(), t.clone()));
    }
    // Sensitive content: each training record and its line (the quote),
    // outside the held-out styles and the calibration slice.
    for r in data.sensitivity {
        if crate::sensitive::is_held_out(r) || is_calibration(&r.id) {
            continue;
        }
        let Some(label) = crate::sensitive::label_index(r) else {
            continue;
        };
        // A long sensitive record is sensitive by one passage, its line:
        // as a whole it would teach that its ordinary passages are too
        // (`reads_whole_text`). A long control is not sensitive as a whole.
        let passages = tomlite_core::segment::passages(&r.text).len();
        if label == 0 || tomlite_core::annotate::sensitive::reads_whole_text(passages) {
            out.push(Example::sensitive_only(r.text.clone(), label as u32));
        }
        if let Some(q) = r.sensitivity.quote.as_deref().filter(|_| label > 0)
            && q != r.text
        {
            out.push(Example::sensitive_only(q, label as u32));
        }
    }
    for e in data.goemotions {
        out.push(Example::affect_only(
            e.text.clone(),
            index_of(&AFFECTS, e.affect).unwrap_or(5) as u32,
        ));
    }
    out
}

/// The heads trained with the adapters: the three ToM-lite heads, and the
/// sensitive head when an example labels it.
pub(super) fn finetune_specs(examples: &[Example]) -> HeadSpecs {
    let spec = |name: &str, labels: Vec<String>, multi_label: bool| HeadSpec {
        wording_cues: false,
        name: name.into(),
        labels,
        multi_label,
        hidden: 0,
    };
    let labels = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
    HeadSpecs {
        tom_kind: spec("tom_kind", labels(&TOM_KINDS), true),
        affect: spec("affect", labels(&AFFECTS), false),
        intensity: spec("intensity", labels(&INTENSITIES), false),
        sensitive: examples.iter().any(|e| e.sensitive.is_some()).then(|| {
            spec(
                "sensitive",
                tomlite_core::annotate::sensitive::labels(),
                false,
            )
        }),
    }
}

/// Per class of `n`: the mean of [`class_weights`]' per-example weights
/// (1 for a class without examples).
pub(super) fn per_class_weights(labels: Vec<usize>, n: usize) -> Vec<f32> {
    let weights = class_weights(&labels, n);
    (0..n)
        .map(|class| {
            labels
                .iter()
                .zip(&weights)
                .find(|(l, _)| **l == class)
                .map_or(1.0, |(_, w)| *w)
        })
        .collect()
}

/// The models crate's fine-tuning options for `ft`: class weights of the
/// single-label heads from the examples, checkpoints in `checkpoint_dir`.
pub(super) fn finetune_options(
    ft: &FineTuneConfig,
    examples: &[Example],
    specs: &HeadSpecs,
    checkpoint_dir: PathBuf,
) -> FineTuneOptions {
    let labels_of = |label: fn(&Example) -> Option<u32>| -> Vec<usize> {
        examples
            .iter()
            .filter_map(|e| label(e).map(|l| l as usize))
            .collect()
    };
    FineTuneOptions {
        epochs: ft.epochs,
        seed: ft.seed,
        batch_size: ft.batch_size,
        max_tokens: ft.max_tokens,
        affect_class_weights: per_class_weights(labels_of(|e| e.affect), AFFECTS.len()),
        intensity_class_weights: per_class_weights(labels_of(|e| e.intensity), INTENSITIES.len()),
        sensitive_class_weights: if specs.sensitive.is_some() {
            per_class_weights(
                labels_of(|e| e.sensitive),
                tomlite_core::annotate::sensitive::labels().len(),
            )
        } else {
            Vec::new()
        },
        affect_only_per_epoch: Some(ft.goemotions),
        checkpoint_dir: Some(checkpoint_dir),
        resume: ft.resume,
        ..FineTuneOptions::default()
    }
}

/// Copies an earlier run's adapters and their card into `heads_dir` (after
/// checking the file's hash against the card), so that the heads fitted
/// next belong to them; the card's run summary goes into the heads' card.
pub(super) fn reuse_adapters(
    from: &Path,
    heads_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<FineTunedInfo, LearnError> {
    let (_, card) = tomlite_models::finetune::FineTuned::load(from)?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(from, heads_dir) {
        std::fs::create_dir_all(heads_dir).map_err(|source| LearnError::Write {
            path: heads_dir.to_path_buf(),
            source,
        })?;
        for f in [
            tomlite_models::finetune::ADAPTERS_FILE,
            tomlite_models::finetune::ADAPTERS_CARD_FILE,
        ] {
            let (src, dst) = (from.join(f), heads_dir.join(f));
            std::fs::copy(&src, &dst).map_err(|source| LearnError::Write {
                path: dst.clone(),
                source,
            })?;
        }
    }
    progress(&format!(
        "fitting the heads on the encoder with the adapters of {} (sha256 {}, {} epochs, seed {}); no fine-tuning",
        from.display(),
        &card.adapters_sha256[..12.min(card.adapters_sha256.len())],
        card.epochs,
        card.seed
    ));
    // The adapters' card carries the dev figures of the heads last fitted
    // on them; the heads fitted now have their own, so only the run's own
    // figures (losses, examples, time) go into the new card.
    let mut figures = card.figures;
    if let Some(f) = figures.as_object_mut() {
        f.remove("dev");
    }
    Ok(FineTunedInfo {
        summary: json!({
            "adapters_sha256": card.adapters_sha256,
            "seed": card.seed,
            "epochs": card.epochs,
            "lora": card.lora,
            "figures": figures,
            "heads_refitted_from": from.display().to_string(),
        }),
        sha256: card.adapters_sha256,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::data::tom_set;

    fn labeled(id: &str, text: &str, kinds: &[&str], quotes: &[&str]) -> LabeledRecord {
        serde_json::from_value(json!({
            "id": id, "text": text,
            "gold": {"tom_kinds": kinds, "affect": "sad", "intensity": "high",
                     "source_quotes": quotes}
        }))
        .expect("labeled record")
    }

    // Fine-tuning examples: records train all three heads and their quotes
    // tom_kind only; the calibration fifth is left out; curated rejections
    // stay a 0 for their kind and unknown (-1) for the others; GoEmotions
    // comments train affect only, as many as asked, drawn by the seed.
    #[test]
    fn finetune_examples_mask_each_source_to_the_heads_it_labels() {
        let ids: Vec<String> = (0..200).map(|i| format!("rec-{i}")).collect();
        let cal = ids.iter().filter(|id| is_calibration(id)).count();
        assert!(cal > 20 && cal < 60, "{cal}");
        let records: Vec<LabeledRecord> = ids
            .iter()
            .map(|id| {
                labeled(
                    id,
                    "I am sad. I want to rest.",
                    &["emotion", "goal"],
                    &["I am sad.", "I want to rest."],
                )
            })
            .collect();
        let tr = tom_set(&records, "x.jsonl", true).unwrap();
        let mut rejected = vec![-1f32; TOM_KINDS.len()];
        rejected[3] = 0.0;
        let cur = CuratedSet {
            texts: vec!["Keep it short.".into()],
            targets: vec![rejected.clone()],
            group: vec![0],
            stats: BTreeMap::new(),
        };
        let goemotions: Vec<AffectExample> = (0..50)
            .map(|i| AffectExample {
                text: format!("comment {i}"),
                affect: if i % 2 == 0 { "happy" } else { "angry" },
            })
            .collect();
        let hashes = BTreeMap::new();
        let data = FineTuneData {
            records: &records,
            tr: &tr,
            cur: &cur,
            goemotions: &goemotions,
            sensitivity: &[],
            data_hashes: &hashes,
        };
        let ex = finetune_examples(&data);
        let kept = 200 - cal;
        let recs: Vec<&Example> = ex.iter().filter(|e| e.intensity.is_some()).collect();
        assert_eq!(recs.len(), kept);
        let goal = TOM_KINDS.iter().position(|k| *k == "goal").unwrap();
        let emotion = TOM_KINDS.iter().position(|k| *k == "emotion").unwrap();
        for e in &recs {
            let t = e.tom_kind.as_ref().unwrap();
            assert_eq!((t[goal], t[emotion]), (1.0, 1.0));
            assert_eq!(e.affect, Some(index_of(&AFFECTS, "sad").unwrap() as u32));
        }
        let sentences: Vec<&Example> = ex
            .iter()
            .filter(|e| e.tom_kind.is_some() && e.intensity.is_none() && e.affect.is_none())
            .collect();
        // Two quotes per kept record, plus the curated one.
        assert_eq!(sentences.len(), 2 * kept + 1);
        let q = sentences
            .iter()
            .find(|e| e.text == "I want to rest.")
            .unwrap();
        let t = q.tom_kind.as_ref().unwrap();
        assert_eq!(t[goal], 1.0);
        assert_eq!(t.iter().sum::<f32>(), 1.0);
        let c = sentences
            .iter()
            .find(|e| e.text == "Keep it short.")
            .unwrap();
        assert_eq!(c.tom_kind.as_ref(), Some(&rejected));
        let ge: Vec<&Example> = ex.iter().filter(|e| e.tom_kind.is_none()).collect();
        assert_eq!(ge.len(), 50);
        assert!(
            ge.iter()
                .all(|e| e.affect.is_some() && e.intensity.is_none())
        );
        assert_eq!(ex, finetune_examples(&data));
    }
}
