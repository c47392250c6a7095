//! The node registry (`--nodes`, JSONL or Parquet): `id`, `kind`, `name`,
//! `aliases`. Loaded once and checked; a registry that is ambiguous stops the
//! run with a configuration error rather than let the job guess.
//!
//! Every name and alias is a pattern the classifier links in record text
//! (see [`crate::graph::mentions`]), so one that would match almost any text is
//! refused ([`name_problem`]): fewer than two letters or digits (`I`, `a`,
//! `.`), an invisible or control character (U+200B, a soft hyphen, a
//! bidirectional control), or a common function word ([`STOP_WORDS`]:
//! `the`, `and`, `it`, ...).

use foldhash::{HashMap, HashSet};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::ingest::bytes::{HashingRead, Tally, read_line_capped};
use crate::ingest::record::json_type;

/// One registry node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `user:sam`, `persona:ada`, ...
    pub id: String,
    /// `user`, `persona`, `person`, `agent`, ...
    pub kind: String,
    /// Display name.
    pub name: String,
    /// Other names the node goes by.
    pub aliases: Vec<String>,
}

/// A registry that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NodesError {
    /// The file cannot be read.
    #[error("cannot read node registry {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A line or row is not a valid node.
    #[error("node registry {}, line {line}: {field}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line or row.
        line: u64,
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The Parquet file cannot be read.
    #[error("cannot read node registry {}", path.display())]
    Ingest {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: Box<crate::ingest::record::IngestError>,
    },
}

/// Function words no name or alias may be (compared case-insensitively):
/// each occurs in most texts, so as a name it would link nearly every record.
pub const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "but", "nor", "so", "yet", "if", "then", "than", "as", "at",
    "by", "for", "from", "in", "into", "of", "off", "on", "onto", "out", "over", "to", "up",
    "with", "about", "after", "before", "i", "me", "my", "mine", "myself", "you", "your", "yours",
    "he", "him", "his", "she", "her", "hers", "it", "its", "we", "us", "our", "ours", "they",
    "them", "their", "theirs", "this", "that", "these", "those", "is", "am", "are", "was", "were",
    "be", "been", "do", "does", "did", "has", "have", "had", "not", "no", "yes", "all", "any",
    "some", "what", "which", "who", "whom", "when", "where", "why", "how", "there", "here",
];

/// Whether a character is invisible or a control: C0/C1 controls, DEL,
/// and the format characters that render as nothing (soft hyphen,
/// zero-width spaces and joiners, bidirectional marks and controls, word
/// joiner and invisible operators, the byte-order mark).
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
            | '\u{FFA0}' | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
}

/// Why a name or alias cannot be a pattern to link, if it cannot.
pub fn name_problem(name: &str) -> Option<String> {
    let trimmed = name.trim();
    if let Some(c) = trimmed.chars().find(|&c| invisible(c)) {
        return Some(format!(
            "{name:?} holds the invisible or control character U+{:04X}; names are matched in record text and must be visible",
            c as u32
        ));
    }
    if trimmed.chars().filter(|c| c.is_alphanumeric()).count() < 2 {
        return Some(format!(
            "{name:?} has fewer than two letters or digits: it would link nearly every record; use the full name"
        ));
    }
    let lower = trimmed.to_lowercase();
    if STOP_WORDS.contains(&lower.as_str()) {
        return Some(format!(
            "{name:?} is a common word (it would link nearly every record); use the full name"
        ));
    }
    None
}

/// The loaded registry.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    nodes: Vec<Node>,
    ids: HashSet<String>,
    /// sha256 of the registry file.
    pub sha256: Option<String>,
}

impl Registry {
    /// Loads and checks a registry file, one line or row at a time (no
    /// row is kept once it is a node), in time linear in its size.
    pub fn load(path: &Path) -> Result<Self, NodesError> {
        let mut b = Builder {
            path,
            reg: Registry::default(),
            alias_owner: HashMap::default(),
            own: HashSet::default(),
        };
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
        {
            let (mut line, mut first_error) = (0u64, None);
            crate::ingest::parquet::rows_each(path, &["id", "kind", "name", "aliases"], |m| {
                line += 1;
                if first_error.is_none()
                    && let Err(e) = b.add(line, &m)
                {
                    first_error = Some(e);
                }
            })
            .map_err(|e| NodesError::Ingest {
                path: path.to_path_buf(),
                source: Box::new(e),
            })?;
            if let Some(e) = first_error {
                return Err(e);
            }
            let mut reg = b.reg;
            reg.sha256 = Some(
                crate::hash::sha256_file(path).map_err(|source| NodesError::Io {
                    path: path.to_path_buf(),
                    source,
                })?,
            );
            return Ok(reg);
        }
        // The registry is read once and hashed as it is read, so the
        // receipt's sha256 describes the bytes that made the nodes, even
        // from a pipe (`--nodes <(...)`).
        let tally = Arc::new(Mutex::new(Tally::default()));
        {
            jsonl_each(path, tally.clone(), |line, bytes| {
                // The common case, a well-formed node, is read straight into
                // its fields; anything else goes through the generic reader
                // for a message naming the field.
                match serde_json::from_slice::<Line>(bytes) {
                    Ok(l) if l.plain() => {
                        b.push(line, l.id, l.kind, l.name, l.aliases.unwrap_or_default())
                    }
                    _ => b.add(line, &object(path, line, bytes)?),
                }
            })?;
        }
        let mut reg = b.reg;
        reg.sha256 = Some(tally.lock().unwrap_or_else(|p| p.into_inner()).hex());
        Ok(reg)
    }

    /// Whether a node id is in the registry.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// The nodes, in file order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The registry being loaded, with what its checks need.
struct Builder<'a> {
    path: &'a Path,
    reg: Registry,
    /// Lower-cased name or alias → the node that has it.
    alias_owner: HashMap<String, String>,
    /// The current node's own lower-cased names.
    own: HashSet<String>,
}

impl Builder<'_> {
    /// Checks one line or row and adds its node.
    fn add(&mut self, line: u64, m: &Map<String, Value>) -> Result<(), NodesError> {
        let invalid = |field: &str, message: String| NodesError::Invalid {
            path: self.path.to_path_buf(),
            line,
            field: field.to_string(),
            message,
        };
        let text = |field: &str| -> Result<String, NodesError> {
            match m.get(field) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                Some(Value::String(_)) => Err(invalid(field, "must not be empty".into())),
                None | Some(Value::Null) => Err(invalid(field, "missing required field".into())),
                Some(v) => Err(invalid(
                    field,
                    format!("expected a string, found {}", json_type(v)),
                )),
            }
        };
        let id = text("id")?;
        let kind = text("kind")?;
        let name = text("name")?;
        let aliases: Vec<String> = match m.get("aliases") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(xs)) => xs
                .iter()
                .map(|x| match x {
                    Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    other => Err(invalid(
                        "aliases",
                        format!("expected non-empty strings, found {}", json_type(other)),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(invalid(
                    "aliases",
                    format!("expected a list, found {}", json_type(v)),
                ));
            }
        };
        self.push(line, id, kind, name, aliases)
    }

    /// Checks a node whose fields are non-empty strings, and adds it.
    fn push(
        &mut self,
        line: u64,
        id: String,
        kind: String,
        name: String,
        aliases: Vec<String>,
    ) -> Result<(), NodesError> {
        let invalid = |field: &str, message: String| NodesError::Invalid {
            path: self.path.to_path_buf(),
            line,
            field: field.to_string(),
            message,
        };
        if let Some(problem) = name_problem(&name) {
            return Err(invalid("name", problem));
        }
        for (i, a) in aliases.iter().enumerate() {
            if let Some(problem) = name_problem(a) {
                return Err(invalid(&format!("aliases[{i}]"), problem));
            }
        }
        if id.starts_with("memory:") {
            return Err(invalid(
                "id",
                format!("`{id}`: memory nodes come from the records, not the registry"),
            ));
        }
        if !self.reg.ids.insert(id.clone()) {
            return Err(invalid("id", format!("duplicate node id `{id}`")));
        }
        self.own.clear();
        for n in std::iter::once(&name).chain(&aliases) {
            let key = n.trim().to_lowercase();
            if self.own.contains(&key) {
                continue;
            }
            self.own.insert(key.clone());
            if let Some(other) = self.alias_owner.insert(key, id.clone()) {
                return Err(invalid(
                    "aliases",
                    format!("name or alias `{n}` of `{id}` is also a name or alias of `{other}`"),
                ));
            }
        }
        self.reg.nodes.push(Node {
            id,
            kind,
            name,
            aliases,
        });
        Ok(())
    }
}

fn jsonl_each(
    path: &Path,
    tally: Arc<Mutex<Tally>>,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), NodesError>,
) -> Result<(), NodesError> {
    let io = |source| NodesError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut r = BufReader::new(HashingRead::new(file, tally));
    let mut buf = Vec::new();
    let mut line = 0;
    while let Some(read) = read_line_capped(&mut r, &mut buf, 1 << 20).map_err(io)? {
        line += 1;
        if line == 1 {
            if let Some(what) = crate::ingest::bytes::utf16(&buf) {
                return Err(NodesError::Invalid {
                    path: path.to_path_buf(),
                    line,
                    field: "(line)".into(),
                    message: what.into(),
                });
            }
            crate::ingest::bytes::strip_utf8_bom(&mut buf);
        }
        if !read.over && buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        each(line, &buf)?;
    }
    Ok(())
}

/// A registry line as a JSON object, or the error naming the line.
fn object(path: &Path, line: u64, bytes: &[u8]) -> Result<Map<String, Value>, NodesError> {
    let invalid = |message: String| NodesError::Invalid {
        path: path.to_path_buf(),
        line,
        field: "(line)".into(),
        message,
    };
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(v) => Err(invalid(format!(
            "expected a JSON object, found {}",
            json_type(&v)
        ))),
        Err(e) => Err(invalid(format!("malformed JSON: {e}"))),
    }
}

/// A well-formed registry line, read without the generic JSON tree.
#[derive(serde::Deserialize)]
struct Line {
    id: String,
    kind: String,
    name: String,
    #[serde(default)]
    aliases: Option<Vec<String>>,
}

impl Line {
    /// Every field a non-empty string: nothing for the generic reader to report.
    fn plain(&self) -> bool {
        let ok = |s: &String| !s.trim().is_empty();
        ok(&self.id) && ok(&self.kind) && ok(&self.name) && self.aliases.iter().flatten().all(ok)
    }
}
