//! The error of training and evaluation.

use std::path::PathBuf;

/// Errors of training and evaluation.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// The encoder, the heads or the data failed.
    #[error(transparent)]
    Models(Box<tomlite_models::Error>),
    /// The classifier could not be loaded.
    #[error(transparent)]
    Classifier(Box<tomlite_core::annotate::classifier::ClassifierError>),
    /// A label in the data is outside the vocabulary.
    #[error("{path}: record {id}: {field} `{label}` is not in the vocabulary")]
    Label {
        /// The data file.
        path: String,
        /// The record.
        id: String,
        /// The field.
        field: &'static str,
        /// The label.
        label: String,
    },
    /// The curated decisions cannot be read.
    #[error(transparent)]
    Curated(Box<tomlite_core::curate::CurateError>),
    /// The training registry cannot be used.
    #[error(transparent)]
    Nodes(Box<tomlite_core::graph::nodes::NodesError>),
    /// The adapters' card cannot be updated.
    #[error("cannot update {}", path.display())]
    Card {
        /// The card.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stale adapters cannot be removed from the output folder.
    #[error("cannot remove {}", path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The adapters cannot be copied into the output folder.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A data file cannot be hashed.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl From<tomlite_models::Error> for LearnError {
    fn from(e: tomlite_models::Error) -> Self {
        Self::Models(Box::new(e))
    }
}

impl From<tomlite_core::annotate::classifier::ClassifierError> for LearnError {
    fn from(e: tomlite_core::annotate::classifier::ClassifierError) -> Self {
        Self::Classifier(Box::new(e))
    }
}
