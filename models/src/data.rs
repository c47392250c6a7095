//! Labeled data: the project's ToM-lite JSONL (records with a `gold`
//! object, docs/labeling.md) and GoEmotions TSV mapped to the six affects.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Error;

/// A labeled record.
#[derive(Debug, Clone, Deserialize)]
pub struct LabeledRecord {
    /// The record id.
    pub id: String,
    /// The record text.
    pub text: String,
    /// The persona (memory links stay within one).
    #[serde(default)]
    pub persona_id: String,
    /// When it was written (memory links point only at earlier records).
    #[serde(default)]
    pub created_at: String,
    /// The gold labels.
    pub gold: Gold,
    /// How the record is written (`data/training/styles`); `None` for the
    /// first set.
    #[serde(default)]
    pub style: Option<String>,
}

/// Gold labels of one record (docs/labeling.md).
#[derive(Debug, Clone, Deserialize)]
pub struct Gold {
    /// 0 to 2 kinds, primary first.
    #[serde(default)]
    pub tom_kinds: Vec<String>,
    /// One affect.
    pub affect: String,
    /// One intensity.
    pub intensity: String,
    /// One verbatim quote per kind.
    #[serde(default)]
    pub source_quotes: Vec<String>,
    /// Names of people and agents, as written.
    #[serde(default)]
    pub people: Vec<String>,
    /// Registry nodes the record mentions (ids).
    #[serde(default)]
    pub mentions: Vec<String>,
    /// Mentioned people and agents that are not in the registry, as written.
    #[serde(default)]
    pub unknown_mentions: Vec<String>,
    /// Earlier records of the same persona this one follows up on.
    #[serde(default)]
    pub links_to: Vec<String>,
    /// Whether `people`, `mentions` and `unknown_mentions` were labeled
    /// (absent: true). A set labeled for the kinds, affect and intensity
    /// only says `false`: its records train no person or edge head and
    /// are not scored on edges, where an unlabeled name would count as
    /// no person.
    #[serde(default = "labeled")]
    pub people_labeled: bool,
}

fn labeled() -> bool {
    true
}

/// Reads a labeled JSONL file; a bad line is an error naming it.
pub fn read_labeled(path: &Path) -> Result<Vec<LabeledRecord>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| Error::Data {
                path: path.to_path_buf(),
                line: i as u64 + 1,
                message: e.to_string(),
            })
        })
        .collect()
}

/// A record labeled for sensitive content (`data/sensitivity`).
#[derive(Debug, Clone, Deserialize)]
pub struct SensitivityRecord {
    /// The record id.
    pub id: String,
    /// The record text.
    pub text: String,
    /// How the record is written (the dev split holds out whole styles).
    #[serde(default)]
    pub style: Option<String>,
    /// The label.
    pub sensitivity: SensitivityLabel,
}

/// Whether a record is sensitive, and why.
#[derive(Debug, Clone, Deserialize)]
pub struct SensitivityLabel {
    /// Sensitive or not.
    pub sensitive: bool,
    /// The category of a sensitive record.
    #[serde(default)]
    pub category: Option<String>,
    /// The verbatim line that makes it sensitive.
    #[serde(default)]
    pub quote: Option<String>,
}

/// Reads a sensitivity-labeled JSONL file; a bad line is an error naming
/// it and the field, and so is a sensitive record without a category or a
/// quote that is not part of its text.
pub fn read_sensitivity(path: &Path) -> Result<Vec<SensitivityRecord>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |line: usize, message: String| Error::Data {
        path: path.to_path_buf(),
        line: line as u64 + 1,
        message,
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let de = &mut serde_json::Deserializer::from_str(l);
            let r: SensitivityRecord =
                serde_path_to_error::deserialize(de).map_err(|e| bad(i, e.to_string()))?;
            let s = &r.sensitivity;
            if s.sensitive && s.category.is_none() {
                return Err(bad(
                    i,
                    format!("record {}: sensitivity.category: missing", r.id),
                ));
            }
            if let Some(q) = &s.quote
                && (q.is_empty() || !r.text.contains(q.as_str()))
            {
                return Err(bad(
                    i,
                    format!(
                        "record {}: sensitivity.quote: not a verbatim part of text",
                        r.id
                    ),
                ));
            }
            Ok(r)
        })
        .collect()
}

/// GoEmotions label → affect (docs/labeling.md); `None` for the unmapped ones.
pub fn goemotions_affect(label: &str) -> Option<&'static str> {
    Some(match label {
        "anger" | "annoyance" | "disapproval" | "disgust" => "angry",
        "sadness" | "grief" | "disappointment" | "remorse" => "sad",
        "fear" | "nervousness" => "anxious",
        "confusion" => "confused",
        "joy" | "amusement" | "love" | "gratitude" | "excitement" | "optimism" | "pride"
        | "relief" | "admiration" | "approval" | "caring" => "happy",
        "neutral" => "neutral",
        _ => return None,
    })
}

/// A GoEmotions example with exactly one mapped affect.
#[derive(Debug, Clone, PartialEq)]
pub struct AffectExample {
    /// The comment.
    pub text: String,
    /// Its affect.
    pub affect: &'static str,
}

/// Reads a GoEmotions TSV split with `labels.txt` beside it, keeping the
/// examples whose labels map to exactly one affect.
pub fn read_goemotions(tsv: &Path) -> Result<Vec<AffectExample>, Error> {
    let labels_path: PathBuf = tsv.with_file_name("labels.txt");
    let names = std::fs::read_to_string(&labels_path).map_err(|source| Error::Io {
        op: "read",
        path: labels_path.clone(),
        source,
    })?;
    let names: Vec<&str> = names
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let text = std::fs::read_to_string(tsv).map_err(|source| Error::Io {
        op: "read",
        path: tsv.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |m: String| Error::Data {
            path: tsv.to_path_buf(),
            line: i as u64 + 1,
            message: m,
        };
        let mut cols = line.split('\t');
        let (Some(t), Some(ids)) = (cols.next(), cols.next()) else {
            return Err(bad("expected text<TAB>labels<TAB>id".into()));
        };
        let mut affects: Vec<&'static str> = Vec::new();
        for id in ids.split(',') {
            let idx: usize = id
                .trim()
                .parse()
                .map_err(|_| bad(format!("label `{id}` is not an index")))?;
            let name = names
                .get(idx)
                .ok_or_else(|| bad(format!("label index {idx} is not in labels.txt")))?;
            if let Some(a) = goemotions_affect(name)
                && !affects.contains(&a)
            {
                affects.push(a);
            }
        }
        if let [a] = affects[..] {
            out.push(AffectExample {
                text: t.to_string(),
                affect: a,
            });
        }
    }
    Ok(out)
}

/// Whether a record goes to the dev split: a stable hash of its id, 15 %.
pub fn is_dev(id: &str) -> bool {
    fnv1a64(id) % 100 < 15
}

/// The 64-bit FNV-1a hash of `key`'s bytes: stable across platforms and
/// releases, so the splits it draws never move.
pub fn fnv1a64(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
