//! `tomlite train`: fine-tunes the encoder and trains the heads, with
//! progress on stderr.

use std::io::IsTerminal as _;

use tomlite_models::finetune::Progress;
use tomlite_train::TrainConfig;

use crate::cli::summary;
use crate::{ExitStatus, Failure};

/// Trains from the resolved config and prints where the heads went.
pub fn train(config: TrainConfig) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    if let Some(dir) = &config.curated {
        let curated = tomlite::curate::load_for_training(dir).map_err(Failure::config)?;
        eprintln!(
            "curated: {} decisions in {}",
            curated.rows().count(),
            dir.display()
        );
    }
    let tty = std::io::stderr().is_terminal();
    let mut progress = |line: &str| print_progress_line(line, tty);
    let mut steps = |step: &Progress| print_step(step, tty);
    let card =
        tomlite_train::train_with_steps(&config, &mut progress, &mut steps).map_err(|error| {
            Failure {
                status: ExitStatus::Failed,
                error: error.into(),
            }
        })?;
    let adapters = card.training["adapters_sha256"]
        .as_str()
        .map(|sha| format!(", adapters {}", &sha[..12.min(sha.len())]))
        .unwrap_or_default();
    println!(
        "trained heads written to {} in {:.0}s (encoder {}{adapters})",
        config.heads_dir.display(),
        started.elapsed().as_secs_f64(),
        &card.encoder_sha256[..12]
    );
    Ok(())
}

/// A training phase's line: embedding progress redrawn in place on a
/// terminal, other lines kept.
fn print_progress_line(line: &str, tty: bool) {
    if tty && line.starts_with("embedding") {
        eprint!("\r{line}\x1b[K");
    } else {
        if tty {
            eprint!("\r\x1b[K");
        }
        eprintln!("{line}");
    }
}

/// Fine-tuning steps: a bar redrawn in place on a terminal; plain lines
/// (about 20 per epoch, and each epoch's end) otherwise.
fn print_step(step: &Progress, tty: bool) {
    let line = summary::step_line(step);
    if tty {
        eprint!("\r{line}\x1b[K");
        if step.epoch_done {
            eprintln!();
        }
    } else {
        let per_epoch = step.steps.div_ceil(step.epochs.max(1)).max(1);
        let every = per_epoch.div_ceil(20).max(1);
        if step.epoch_done || step.step.is_multiple_of(every) {
            eprintln!("{line}");
        }
    }
}
