//! The checkpoint written after each epoch (adapters, heads, optimiser
//! state, generator, epoch) and the atomic file writes it and the
//! adapters use.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor, Var};
use serde::{Deserialize, Serialize};

use super::optim::AdamW;
use super::{CHECKPOINT_FILE, CHECKPOINT_STATE_FILE, Example, FineTuneOptions, HeadSpecs};
use crate::Error;
use crate::lora::sha256_hex;

/// The state file of a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CheckpointState {
    /// Epochs finished.
    pub(super) epoch: usize,
    /// Optimiser steps taken.
    pub(super) step: usize,
    /// The batch-order generator after `epoch` epochs.
    pub(super) rng_state: u64,
    /// sha256 of the settings (epochs aside), the heads and the examples:
    /// a checkpoint resumes only the run it belongs to.
    pub(super) fingerprint: String,
    /// Mean loss of each finished epoch.
    pub(super) epoch_losses: Vec<f64>,
}

/// sha256 over the settings (without `epochs` and the checkpoint fields),
/// the heads and the examples.
pub(super) fn fingerprint(
    examples: &[Example],
    specs: &HeadSpecs,
    opts: &FineTuneOptions,
) -> Result<String, Error> {
    let settings = FineTuneOptions {
        epochs: 0,
        ..opts.clone()
    };
    let json =
        serde_json::to_vec(&(settings, specs, examples)).map_err(|e| Error::InvalidOptions {
            reason: format!("cannot serialise the run's settings: {e}"),
        })?;
    Ok(sha256_hex(&json))
}

pub(super) fn save_checkpoint(
    dir: &Path,
    vars: &[(String, Var)],
    adam: &AdamW,
    state: &CheckpointState,
) -> Result<(), Error> {
    create_dir(dir)?;
    let mut ts = HashMap::new();
    for ((name, var), (m, v)) in vars.iter().zip(&adam.moments) {
        ts.insert(format!("param.{name}"), var.as_tensor().clone());
        ts.insert(format!("adam_m.{name}"), m.clone());
        ts.insert(format!("adam_v.{name}"), v.clone());
    }
    // Tensors first, then the state that names their hash: a crash between
    // the two leaves the previous state, which then fails its check rather
    // than resuming from mixed epochs.
    let bytes = save_tensors(&ts, &dir.join(CHECKPOINT_FILE))?;
    let state = CheckpointState {
        fingerprint: format!("{}:{}", state.fingerprint, sha256_hex(&bytes)),
        ..state.clone()
    };
    write_json(&dir.join(CHECKPOINT_STATE_FILE), &state)
}

pub(super) fn load_checkpoint(
    dir: &Path,
    vars: &[(String, Var)],
    adam: &mut AdamW,
    fingerprint: &str,
) -> Result<CheckpointState, Error> {
    let state_path = dir.join(CHECKPOINT_STATE_FILE);
    let mut state: CheckpointState = read_json(&state_path)?;
    let file = dir.join(CHECKPOINT_FILE);
    let bytes = std::fs::read(&file).map_err(|source| Error::Io {
        op: "read",
        path: file.clone(),
        source,
    })?;
    let bad = |message: String| Error::Adapters {
        path: file.clone(),
        message,
    };
    let expected = format!("{fingerprint}:{}", sha256_hex(&bytes));
    match state.fingerprint.split_once(':') {
        Some((run, _)) if run != fingerprint => {
            return Err(Error::Adapters {
                path: state_path,
                message: "the checkpoint belongs to a run with other settings, heads or examples"
                    .into(),
            });
        }
        _ if state.fingerprint != expected => {
            return Err(bad(
                "the tensors are not the ones the checkpoint state names".into(),
            ));
        }
        _ => {}
    }
    state.fingerprint = fingerprint.to_string();
    let ts = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu)
        .map_err(|e| bad(e.to_string()))?;
    let take = |name: &str, like: &Tensor| -> Result<Tensor, Error> {
        let t = ts
            .get(name)
            .ok_or_else(|| bad(format!("tensor {name} is missing")))?;
        if t.dims() != like.dims() {
            return Err(bad(format!(
                "tensor {name} is {:?}, not {:?}",
                t.dims(),
                like.dims()
            )));
        }
        Ok(t.clone())
    };
    for ((name, var), (m, v)) in vars.iter().zip(adam.moments.iter_mut()) {
        var.set(&take(&format!("param.{name}"), var.as_tensor())?)?;
        *m = take(&format!("adam_m.{name}"), m)?;
        *v = take(&format!("adam_v.{name}"), v)?;
    }
    adam.step = state.step;
    Ok(state)
}

pub(super) fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        op: "create",
        path: dir.to_path_buf(),
        source,
    })
}

/// Saves tensors as safetensors to a temporary file beside `path`, renames
/// it over `path`, and returns the bytes written.
pub(super) fn save_tensors(ts: &HashMap<String, Tensor>, path: &Path) -> Result<Vec<u8>, Error> {
    let tmp = path.with_extension("tmp");
    candle_core::safetensors::save(ts, &tmp).map_err(|e| Error::Adapters {
        path: tmp.clone(),
        message: e.to_string(),
    })?;
    let bytes = std::fs::read(&tmp).map_err(|source| Error::Io {
        op: "read",
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        op: "rename",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(bytes)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|source| Error::Io {
        op: "write",
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| Error::Io {
        op: "rename",
        path: path.to_path_buf(),
        source,
    })
}

pub(super) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let mut json = serde_json::to_string_pretty(value).map_err(|e| Error::Adapters {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    json.push('\n');
    write_atomic(path, json.as_bytes())
}

pub(super) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Adapters {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
