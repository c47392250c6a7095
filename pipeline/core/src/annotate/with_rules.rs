//! The sensitive rules for annotators that do not run them: an annotations
//! file, raw annotator output. The rules need no model, so a password, a
//! card number or a self-harm statement is caught whatever annotated the
//! record: [`WithRules`] wraps the annotator and adds the rules' finding to
//! each annotation that carries no detection of its own at the policy's
//! threshold.

use sha2::{Digest as _, Sha256};
use tomlite_staging::Digest;

use crate::annotate::sensitive::{RULES_VERSION, Thresholds, detect};
use crate::annotate::sensitive_rules::Rules;
use crate::annotate::{AnnotateError, Annotated, Annotator, AnnotatorInfo};
use crate::graph::memory::MemoryIndex;
use crate::ingest::record::{Record, Reject};

/// An annotator with the sensitive rules run on every record it annotates.
pub struct WithRules {
    inner: Box<dyn Annotator>,
    rules: Rules,
    thresholds: Thresholds,
}

impl WithRules {
    /// Wraps `inner`; a detection of the annotator's own at or above its
    /// category's threshold in `thresholds` is kept as it is.
    pub fn new(inner: Box<dyn Annotator>, thresholds: Thresholds) -> Self {
        Self {
            inner,
            rules: Rules::new(),
            thresholds,
        }
    }

    /// Adds the rules' finding on `record` to `annotated` when it has no
    /// detection of its own that counts.
    fn check(&self, record: &Record, annotated: &mut Annotated) {
        let Annotated::Parsed(annotation) = annotated else {
            return;
        };
        let counts = annotation.sensitive.as_ref().is_some_and(|s| {
            match (s.category.as_deref(), s.confidence) {
                (Some(c), Some(p)) => p >= self.thresholds.of(c),
                _ => true,
            }
        });
        if counts {
            return;
        }
        let sentences: Vec<((usize, usize), f64)> = crate::segment::passages(&record.text)
            .into_iter()
            .map(|span| (span, 0.0))
            .collect();
        if let Some(found) = detect(
            &record.text,
            None,
            &sentences,
            &[],
            &[],
            &self.rules,
            &self.thresholds,
        ) {
            annotation.sensitive = Some(found);
        }
    }
}

impl Annotator for WithRules {
    fn info(&self) -> AnnotatorInfo {
        self.inner.info()
    }

    fn annotation_digest(&mut self, record: &Record) -> Result<Digest, AnnotateError> {
        // A change of the rules redoes the records annotated under the old
        // ones, as it does for the classifier.
        let inner = self.inner.annotation_digest(record)?;
        let mut h = Sha256::new();
        h.update(inner);
        h.update(RULES_VERSION.as_bytes());
        let mut out = Digest::default();
        let n = out.len();
        out.copy_from_slice(&h.finalize()[..n]);
        Ok(out)
    }

    fn annotate(&mut self, records: &[&Record]) -> Result<Vec<Annotated>, AnnotateError> {
        let mut annotated = self.inner.annotate(records)?;
        for (record, a) in records.iter().zip(annotated.iter_mut()) {
            self.check(record, a);
        }
        Ok(annotated)
    }

    fn input_problems(&mut self) -> Vec<Reject> {
        self.inner.input_problems()
    }

    fn use_memories(&mut self, memories: MemoryIndex) {
        self.inner.use_memories(memories);
    }

    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    fn unused(&self) -> Vec<Reject> {
        self.inner.unused()
    }

    fn stats(&self) -> serde_json::Value {
        self.inner.stats()
    }

    fn status_counts(&self) -> Option<serde_json::Value> {
        self.inner.status_counts()
    }

    fn check_unchanged(&self) -> Result<(), AnnotateError> {
        self.inner.check_unchanged()
    }

    fn sensitive_detectors(&self) -> Vec<String> {
        let mut detectors = self.inner.sensitive_detectors();
        detectors.push(format!("rules:{RULES_VERSION}"));
        detectors
    }
}
