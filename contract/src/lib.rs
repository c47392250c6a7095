//! The subagent contract linter: checks a subagent contract (YAML, the
//! seed's "Required Contract Sections" shape) against every rule of the
//! seed's "Lint Rules", and the JSON Schema of a contract.
//!
//! Each [`Finding`] names the file, the YAML path (`dag_spec.nodes[0].receipts`),
//! the rule id (one of [`Rule::ALL`]), a severity and a message. A contract
//! with any error finding fails.
//!
//! Conventions the rules rely on, where the seed leaves the key open:
//! - a contract is persona-attached when `persona_attached: true` or `kind: persona`;
//! - memory access is a `memory.*` tool, an allowed endpoint, an allowed or
//!   preferred collection or recall profile, or an allowed write (a
//!   `memory_policy` that only denies grants none);
//! - a DAG node spends (model/API calls) when `spends: true`, or, with no
//!   `spends` key, when its `kind` contains `generat`, `llm`, `prompt`,
//!   `model`, `api` or `classif`; its
//!   preflight packet is `prompt_preflight` on the node, in `dag_spec` or at
//!   the top level;
//! - an autonomous loop is `dag_spec.mode: bounded_loop` or any `loop_policy`
//!   (in `dag_spec` or at the top level);
//! - helper access requires receipts through `required_receipts` (a list) or
//!   `receipt_required: true` on the entry;
//! - allowed memory writes require `memory_policy.write_policy.require_verified_receipt: true`;
//! - a retry default above 3, or a maximum above 4, is allowed only with an
//!   `override` (or `exception`) mapping in the same block: `approved_by:
//!   human | project_agent`, `max_attempts` (at least the value), `reason`
//!   and `updated_stop_condition`.
//!
//! ```
//! let yaml = "schema: oc_subagent.persona.v1\nid: x\nkind: worker\n";
//! let findings = tomlite_contract::lint_str("x.yaml", yaml);
//! assert!(findings.iter().any(|f| f.rule == tomlite_contract::Rule::MissingSection));
//! ```

use serde::Serialize;
use serde_json::{Value, json};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The contract fails the lint.
    Error,
    /// Worth fixing; the contract still passes.
    Warning,
}

/// A lint rule: one per condition of the seed's "Lint Rules".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// The file cannot be read or is not a YAML mapping.
    YamlUnreadable,
    /// A required section is missing.
    MissingSection,
    /// `dag_spec` is missing.
    DagSpecMissing,
    /// `dag_spec` has no nodes.
    DagSpecWithoutNodes,
    /// A DAG node has no receipts.
    DagNodeWithoutReceipts,
    /// A DAG node has no stop conditions.
    DagNodeWithoutStopConditions,
    /// `dag_spec.start_gate.require_dag_spec_before_work` is not true.
    StartGateNotRequired,
    /// An autonomous loop lacks max attempts, mutation policy, classifier gate or stop conditions.
    LoopPolicyIncomplete,
    /// A spend node lacks a preflight packet with expected output, schema, validation and rejection criteria.
    SpendNodeWithoutPreflight,
    /// `cannot:` is used instead of the approved boundary fields.
    CannotField,
    /// Bash is present without a (known) bash tier.
    BashWithoutTier,
    /// `status_reporting` is missing.
    StatusReportingMissing,
    /// `status_reporting` is not required, has no project-agent recipient,
    /// no timeout diagnostics, or omits required event fields.
    StatusReportingWeak,
    /// Memory access has no `allowed_endpoints`.
    MemoryWithoutAllowedEndpoints,
    /// Memory recall has no allowed/preferred collections or recall profiles.
    MemoryRecallUnscoped,
    /// A persona-attached subagent lacks `persona_memory_policy`.
    PersonaWithoutMemoryPolicy,
    /// Free-form ToM tags are allowed.
    FreeformTomTagsAllowed,
    /// The subagent can directly create graph edges.
    GraphEdgeCreationAllowed,
    /// Helper access lacks owner, access_mode or forbidden_actions.
    HelperAccessIncomplete,
    /// Helper access does not require receipts.
    HelperAccessWithoutReceipts,
    /// Memory writes are allowed without a verified-receipt requirement.
    MemoryWriteWithoutReceipt,
    /// A reviewer has write access.
    ReviewerHasWriteAccess,
    /// A retry loop is unbounded.
    RetryUnbounded,
    /// A retry loop allows the subagent to override its own budget.
    RetrySelfOverride,
    /// A retry loop omits its default max attempts.
    RetryDefaultMissing,
    /// A bounded iterative retry default is above 3 without an explicit override.
    RetryDefaultAbove3,
    /// A bounded iterative retry absolute max is above 4 without an explicit exception.
    RetryAbsoluteMaxAbove4,
    /// An inner loop's max attempts are above 4 without an explicit exception.
    InnerLoopMaxAbove4,
    /// Direct Arango/Qdrant/raw AQL access is allowed.
    DirectDatabaseAccess,
    /// `kind` is not one of the seed's kinds (a warning).
    UnknownKind,
}

impl Rule {
    /// Every rule.
    pub const ALL: [Rule; 30] = [
        Rule::YamlUnreadable,
        Rule::MissingSection,
        Rule::DagSpecMissing,
        Rule::DagSpecWithoutNodes,
        Rule::DagNodeWithoutReceipts,
        Rule::DagNodeWithoutStopConditions,
        Rule::StartGateNotRequired,
        Rule::LoopPolicyIncomplete,
        Rule::SpendNodeWithoutPreflight,
        Rule::CannotField,
        Rule::BashWithoutTier,
        Rule::StatusReportingMissing,
        Rule::StatusReportingWeak,
        Rule::MemoryWithoutAllowedEndpoints,
        Rule::MemoryRecallUnscoped,
        Rule::PersonaWithoutMemoryPolicy,
        Rule::FreeformTomTagsAllowed,
        Rule::GraphEdgeCreationAllowed,
        Rule::HelperAccessIncomplete,
        Rule::HelperAccessWithoutReceipts,
        Rule::MemoryWriteWithoutReceipt,
        Rule::ReviewerHasWriteAccess,
        Rule::RetryUnbounded,
        Rule::RetrySelfOverride,
        Rule::RetryDefaultMissing,
        Rule::RetryDefaultAbove3,
        Rule::RetryAbsoluteMaxAbove4,
        Rule::InnerLoopMaxAbove4,
        Rule::DirectDatabaseAccess,
        Rule::UnknownKind,
    ];

    /// The rule id (snake_case).
    pub fn id(self) -> &'static str {
        match self {
            Rule::YamlUnreadable => "yaml_unreadable",
            Rule::MissingSection => "missing_section",
            Rule::DagSpecMissing => "dag_spec_missing",
            Rule::DagSpecWithoutNodes => "dag_spec_without_nodes",
            Rule::DagNodeWithoutReceipts => "dag_node_without_receipts",
            Rule::DagNodeWithoutStopConditions => "dag_node_without_stop_conditions",
            Rule::StartGateNotRequired => "start_gate_not_required",
            Rule::LoopPolicyIncomplete => "loop_policy_incomplete",
            Rule::SpendNodeWithoutPreflight => "spend_node_without_preflight",
            Rule::CannotField => "cannot_field",
            Rule::BashWithoutTier => "bash_without_tier",
            Rule::StatusReportingMissing => "status_reporting_missing",
            Rule::StatusReportingWeak => "status_reporting_weak",
            Rule::MemoryWithoutAllowedEndpoints => "memory_without_allowed_endpoints",
            Rule::MemoryRecallUnscoped => "memory_recall_unscoped",
            Rule::PersonaWithoutMemoryPolicy => "persona_without_memory_policy",
            Rule::FreeformTomTagsAllowed => "freeform_tom_tags_allowed",
            Rule::GraphEdgeCreationAllowed => "graph_edge_creation_allowed",
            Rule::HelperAccessIncomplete => "helper_access_incomplete",
            Rule::HelperAccessWithoutReceipts => "helper_access_without_receipts",
            Rule::MemoryWriteWithoutReceipt => "memory_write_without_receipt",
            Rule::ReviewerHasWriteAccess => "reviewer_has_write_access",
            Rule::RetryUnbounded => "retry_unbounded",
            Rule::RetrySelfOverride => "retry_self_override",
            Rule::RetryDefaultMissing => "retry_default_missing",
            Rule::RetryDefaultAbove3 => "retry_default_above_3",
            Rule::RetryAbsoluteMaxAbove4 => "retry_absolute_max_above_4",
            Rule::InnerLoopMaxAbove4 => "inner_loop_max_above_4",
            Rule::DirectDatabaseAccess => "direct_database_access",
            Rule::UnknownKind => "unknown_kind",
        }
    }

    /// The rule's severity.
    pub fn severity(self) -> Severity {
        match self {
            Rule::UnknownKind => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

/// One problem of a contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The contract file.
    pub file: String,
    /// The YAML path (`dag_spec.nodes[0].receipts`; `$` for the document).
    pub path: String,
    /// The rule.
    pub rule: Rule,
    /// Its severity.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

/// The sections every contract declares (the seed's "Required Contract
/// Sections"). `persona_memory_policy` is required only of persona-attached
/// contracts; `dag_spec` and `status_reporting` have rules of their own.
pub const REQUIRED_SECTIONS: [&str; 18] = [
    "schema",
    "id",
    "kind",
    "display_name",
    "role",
    "does_not_own",
    "dag_spec",
    "primary_skills",
    "tool_policy",
    "memory_policy",
    "delegated_access_skills",
    "turn_contract",
    "status_reporting",
    "help_policy",
    "retry_policy",
    "output_contract",
    "artifact_contract",
    "proof_tasks",
];

/// The seed's subagent kinds.
pub const KINDS: [&str; 7] = [
    "persona",
    "worker",
    "reviewer",
    "researcher",
    "assurance",
    "curator",
    "monitor",
];

/// The seed's DAG modes.
pub const DAG_MODES: [&str; 3] = ["single_node", "bounded_dag", "bounded_loop"];

/// The seed's bash tiers.
pub const BASH_TIERS: [&str; 5] = [
    "bash.none",
    "bash.readonly",
    "bash.check",
    "bash.scoped_mutate",
    "bash.system",
];

/// The fields every status event carries.
pub const STATUS_EVENT_FIELDS: [&str; 8] = [
    "subagent_run_id",
    "phase",
    "current_artifact",
    "command_or_api",
    "evidence",
    "bug_or_blocker",
    "next_step",
    "stop_condition",
];

/// What a preflight packet must name (expected output, schema, validation, rejection criteria).
pub const PREFLIGHT_FIELDS: [&str; 4] = [
    "expected_result",
    "response_schema",
    "validation_command",
    "rejection_criteria",
];

/// Tool names and endpoints that mean direct database access.
const DIRECT_DB: [&str; 8] = [
    "direct_arango",
    "direct_qdrant",
    "memory.query_raw",
    "query_raw",
    "raw_query",
    "raw_aql",
    "arango",
    "qdrant",
];

/// Reads a contract file and lints it; an unreadable file is one finding.
pub fn lint_file(path: &std::path::Path) -> Vec<Finding> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => lint_str(&file, &text),
        Err(e) => vec![Finding {
            file,
            path: "$".into(),
            rule: Rule::YamlUnreadable,
            severity: Rule::YamlUnreadable.severity(),
            message: format!("cannot read the file: {e}"),
        }],
    }
}

/// Lints contract YAML text; `file` names it in the findings. Findings
/// come sorted by path, then rule.
pub fn lint_str(file: &str, text: &str) -> Vec<Finding> {
    let mut l = Linter {
        file,
        out: Vec::new(),
    };
    match serde_saphyr::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => l.contract(&v),
        Ok(other) => l.add(
            "$",
            Rule::YamlUnreadable,
            format!("a contract is a YAML mapping, found {}", json_type(&other)),
        ),
        Err(e) => l.add("$", Rule::YamlUnreadable, format!("not valid YAML: {e}")),
    }
    let mut out = l.out;
    out.sort_by(|a, b| (&a.path, a.rule).cmp(&(&b.path, b.rule)));
    out.dedup();
    out
}

struct Linter<'a> {
    file: &'a str,
    out: Vec<Finding>,
}

fn get<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.as_object()?.get(key).filter(|x| !x.is_null())
}

fn at<'v>(v: &'v Value, keys: &[&str]) -> Option<&'v Value> {
    keys.iter().try_fold(v, |v, k| get(v, k))
}

fn is_true(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true)))
}

fn is_denied(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(s)) if s == "denied") || matches!(v, Some(Value::Bool(false)))
}

fn strings(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::Array(xs)) => xs.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => Vec::new(),
    }
}

fn nonempty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(_) => true,
    }
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() || path == "$" {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Linter<'_> {
    fn add(&mut self, path: &str, rule: Rule, message: String) {
        self.out.push(Finding {
            file: self.file.to_string(),
            path: path.to_string(),
            rule,
            severity: rule.severity(),
            message,
        });
    }

    fn contract(&mut self, c: &Value) {
        let kind = get(c, "kind").and_then(Value::as_str).unwrap_or("");
        for s in REQUIRED_SECTIONS {
            if s == "dag_spec" || s == "status_reporting" {
                continue;
            }
            if c.get(s).is_none() {
                self.add(
                    s,
                    Rule::MissingSection,
                    format!("required section `{s}` is missing"),
                );
            }
        }
        if !kind.is_empty() && !KINDS.contains(&kind) {
            self.add(
                "kind",
                Rule::UnknownKind,
                format!("kind `{kind}` is not one of {}", KINDS.join(", ")),
            );
        }
        self.cannot(c, "");
        self.dag(c);
        self.tools(c, kind);
        self.status(c);
        self.memory(c);
        self.persona(c, kind);
        self.helpers(c);
        self.retries(c);
    }

    /// `cannot:` anywhere in the document.
    fn cannot(&mut self, v: &Value, path: &str) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    let p = join(path, k);
                    if k == "cannot" {
                        self.add(
                            &p,
                            Rule::CannotField,
                            "`cannot:` is not a contract field: use does_not_own, forbidden_actions, forbidden_behavior, tool_policy.denied or memory_policy.denied_endpoints".into(),
                        );
                    }
                    self.cannot(x, &p);
                }
            }
            Value::Array(xs) => {
                for (i, x) in xs.iter().enumerate() {
                    self.cannot(x, &format!("{path}[{i}]"));
                }
            }
            _ => {}
        }
    }

    fn dag(&mut self, c: &Value) {
        let Some(dag) = get(c, "dag_spec") else {
            self.add(
                "dag_spec",
                Rule::DagSpecMissing,
                "every subagent requires a dag_spec before doing work".into(),
            );
            return;
        };
        let nodes = match get(dag, "nodes") {
            Some(Value::Array(n)) if !n.is_empty() => n.as_slice(),
            _ => {
                self.add(
                    "dag_spec.nodes",
                    Rule::DagSpecWithoutNodes,
                    "dag_spec has no nodes".into(),
                );
                &[]
            }
        };
        let preflight_outer = get(dag, "prompt_preflight").or_else(|| get(c, "prompt_preflight"));
        for (i, n) in nodes.iter().enumerate() {
            let p = format!("dag_spec.nodes[{i}]");
            let id = get(n, "id").and_then(Value::as_str).unwrap_or("?");
            if !nonempty(get(n, "receipts")) {
                self.add(
                    &join(&p, "receipts"),
                    Rule::DagNodeWithoutReceipts,
                    format!("node `{id}` names no receipts"),
                );
            }
            if !nonempty(get(n, "stop_conditions")) {
                self.add(
                    &join(&p, "stop_conditions"),
                    Rule::DagNodeWithoutStopConditions,
                    format!("node `{id}` names no stop conditions"),
                );
            }
            let nk = get(n, "kind").and_then(Value::as_str).unwrap_or("");
            // An explicit `spends:` decides; else the node's kind does.
            let spends = match get(n, "spends") {
                Some(v) => is_true(Some(v)),
                None => ["generat", "llm", "prompt", "model", "api", "classif"]
                    .iter()
                    .any(|w| nk.contains(w)),
            };
            if spends {
                let (pf, pf_path) = match get(n, "prompt_preflight") {
                    Some(pf) => (Some(pf), join(&p, "prompt_preflight")),
                    None => (preflight_outer, join(&p, "prompt_preflight")),
                };
                self.preflight(pf, &pf_path, id);
            }
        }
        if !is_true(at(dag, &["start_gate", "require_dag_spec_before_work"])) {
            self.add(
                "dag_spec.start_gate.require_dag_spec_before_work",
                Rule::StartGateNotRequired,
                "the start gate must require the dag_spec before work (`require_dag_spec_before_work: true`)".into(),
            );
        }
        let mode = get(dag, "mode").and_then(Value::as_str).unwrap_or("");
        let (lp, lp_path) = match (get(dag, "loop_policy"), get(c, "loop_policy")) {
            (Some(l), _) => (Some(l), "dag_spec.loop_policy"),
            (None, Some(l)) => (Some(l), "loop_policy"),
            (None, None) => (None, "dag_spec.loop_policy"),
        };
        if mode == "bounded_loop" || lp.is_some() {
            let lp = lp.unwrap_or(&Value::Null);
            let mut missing = Vec::new();
            if number(get(lp, "max_attempts")).is_none() {
                missing.push("max_attempts");
            }
            if !nonempty(get(lp, "mutation_policy")) {
                missing.push("mutation_policy");
            }
            if !nonempty(get(lp, "classifier_gate")) {
                missing.push("classifier_gate");
            }
            if !nonempty(get(lp, "stop_conditions")) {
                missing.push("stop_conditions");
            }
            for m in missing {
                self.add(
                    &join(lp_path, m),
                    Rule::LoopPolicyIncomplete,
                    format!("an autonomous loop DAG must declare loop_policy.{m}"),
                );
            }
        }
    }

    fn preflight(&mut self, pf: Option<&Value>, path: &str, node: &str) {
        let Some(pf) = pf else {
            self.add(
                path,
                Rule::SpendNodeWithoutPreflight,
                format!("node `{node}` spends model/API calls but has no prompt_preflight packet"),
            );
            return;
        };
        if !is_true(get(pf, "required")) {
            self.add(
                &join(path, "required"),
                Rule::SpendNodeWithoutPreflight,
                format!("node `{node}`: the preflight packet must be `required: true`"),
            );
        }
        let fields = strings(get(pf, "packet_fields"));
        let missing: Vec<&str> = PREFLIGHT_FIELDS
            .iter()
            .filter(|f| !fields.contains(f))
            .copied()
            .collect();
        if !missing.is_empty() {
            self.add(
                &join(path, "packet_fields"),
                Rule::SpendNodeWithoutPreflight,
                format!(
                    "node `{node}`: the preflight packet lacks {}",
                    missing.join(", ")
                ),
            );
        }
    }

    fn tools(&mut self, c: &Value, kind: &str) {
        let tp = get(c, "tool_policy").unwrap_or(&Value::Null);
        let mut allowed: Vec<(String, &str)> = strings(get(tp, "allowed"))
            .into_iter()
            .map(|s| ("tool_policy.allowed".to_string(), s))
            .collect();
        for key in ["allowed-tools", "allowed_tools"] {
            allowed.extend(
                strings(get(c, key))
                    .into_iter()
                    .map(|s| (key.to_string(), s)),
            );
        }
        let bash = get(tp, "bash");
        let has_bash = bash.is_some()
            || allowed
                .iter()
                .any(|(_, t)| t.to_ascii_lowercase().contains("bash"));
        let tier = bash.and_then(|b| get(b, "tier")).and_then(Value::as_str);
        if has_bash {
            match tier {
                None => self.add(
                    "tool_policy.bash.tier",
                    Rule::BashWithoutTier,
                    format!(
                        "Bash is present without a bash tier ({})",
                        BASH_TIERS.join(" | ")
                    ),
                ),
                Some(t) if !BASH_TIERS.contains(&t) => self.add(
                    "tool_policy.bash.tier",
                    Rule::BashWithoutTier,
                    format!("unknown bash tier `{t}` ({})", BASH_TIERS.join(" | ")),
                ),
                Some(_) => {}
            }
        }
        // Direct database access.
        let mut db: Vec<(String, String)> = allowed
            .iter()
            .filter(|(_, t)| {
                let t = t.to_ascii_lowercase();
                DIRECT_DB.iter().any(|d| t.contains(d)) || t.contains("aql")
            })
            .map(|(p, t)| (p.clone(), t.to_string()))
            .collect();
        let mp = get(c, "memory_policy").unwrap_or(&Value::Null);
        for e in strings(get(mp, "allowed_endpoints")) {
            if matches!(e, "raw_query" | "query_raw" | "aql") {
                db.push(("memory_policy.allowed_endpoints".into(), e.to_string()));
            }
        }
        for cmd in strings(bash.and_then(|b| get(b, "allowed_commands"))) {
            let l = cmd.to_ascii_lowercase();
            if l.contains("arangosh") || l.contains("qdrant") || l.contains("aql") {
                db.push(("tool_policy.bash.allowed_commands".into(), cmd.to_string()));
            }
        }
        for (p, t) in db {
            self.add(
                &p,
                Rule::DirectDatabaseAccess,
                format!(
                    "`{t}` gives direct Arango/Qdrant/raw AQL access; go through the memory service"
                ),
            );
        }
        // Reviewer write access.
        if kind == "reviewer" {
            let mut writes = Vec::new();
            if nonempty(at(tp, &["filesystem", "write", "allowed_globs"])) {
                writes.push((
                    "tool_policy.filesystem.write.allowed_globs".to_string(),
                    "filesystem writes".to_string(),
                ));
            }
            if let Some(t @ ("bash.scoped_mutate" | "bash.system")) = tier {
                writes.push(("tool_policy.bash.tier".into(), format!("bash tier {t}")));
            }
            for (p, t) in &allowed {
                let l = t.to_ascii_lowercase();
                if [
                    "write", "edit", "store", "upsert", "delete", "push", "merge",
                ]
                .iter()
                .any(|w| l.contains(w))
                {
                    writes.push((p.clone(), format!("tool `{t}`")));
                }
            }
            if memory_writes_allowed(mp, &allowed) {
                writes.push(("memory_policy.write_policy".into(), "memory writes".into()));
            }
            for (p, what) in writes {
                self.add(
                    &p,
                    Rule::ReviewerHasWriteAccess,
                    format!("a reviewer must be read-only, but this contract allows {what}"),
                );
            }
        }
    }

    fn status(&mut self, c: &Value) {
        let Some(sr) = get(c, "status_reporting") else {
            self.add(
                "status_reporting",
                Rule::StatusReportingMissing,
                "every subagent must report status to the project agent: declare status_reporting"
                    .into(),
            );
            return;
        };
        let weak = |l: &mut Self, p: &str, m: String| {
            l.add(&join("status_reporting", p), Rule::StatusReportingWeak, m)
        };
        if !is_true(get(sr, "required")) {
            weak(
                self,
                "required",
                "status reporting must be `required: true`".into(),
            );
        }
        if get(sr, "recipient").and_then(Value::as_str) != Some("project_agent") {
            weak(
                self,
                "recipient",
                "the recipient must be `project_agent`".into(),
            );
        }
        if !nonempty(get(sr, "timeout_diagnostics")) {
            weak(
                self,
                "timeout_diagnostics",
                "timeout diagnostics are missing".into(),
            );
        }
        let fields = strings(get(sr, "event_fields"));
        let missing: Vec<&str> = STATUS_EVENT_FIELDS
            .iter()
            .filter(|f| !fields.contains(f))
            .copied()
            .collect();
        if !missing.is_empty() {
            weak(
                self,
                "event_fields",
                format!("status events must carry {}", missing.join(", ")),
            );
        }
    }

    fn memory(&mut self, c: &Value) {
        let tp = get(c, "tool_policy").unwrap_or(&Value::Null);
        let tool_memory: Vec<&str> = strings(get(tp, "allowed"))
            .into_iter()
            .filter(|t| t.starts_with("memory."))
            .collect();
        let mp = get(c, "memory_policy").unwrap_or(&Value::Null);
        let endpoints = strings(get(mp, "allowed_endpoints"));
        let allowed: Vec<(String, &str)> = tool_memory
            .iter()
            .map(|t| ("tool_policy.allowed".to_string(), *t))
            .collect();
        // Access: a memory tool, an allowed endpoint, a collection or profile to
        // use, or an allowed write. A policy that only denies grants none.
        let access = !tool_memory.is_empty()
            || !endpoints.is_empty()
            || [
                "allowed_collections",
                "preferred_collections",
                "allowed_recall_profiles",
            ]
            .iter()
            .any(|k| nonempty(get(mp, k)))
            || memory_writes_allowed(mp, &allowed);
        if !access {
            return;
        }
        if endpoints.is_empty() {
            self.add(
                "memory_policy.allowed_endpoints",
                Rule::MemoryWithoutAllowedEndpoints,
                "memory access declares no allowed_endpoints".into(),
            );
        }
        let recall = endpoints.contains(&"recall") || tool_memory.contains(&"memory.recall");
        if recall
            && ![
                "allowed_collections",
                "preferred_collections",
                "allowed_recall_profiles",
            ]
            .iter()
            .any(|k| nonempty(get(mp, k)))
        {
            self.add(
                "memory_policy.allowed_collections",
                Rule::MemoryRecallUnscoped,
                "memory recall names no allowed_collections, preferred_collections or allowed_recall_profiles".into(),
            );
        }
        if memory_writes_allowed(mp, &allowed)
            && !is_true(at(mp, &["write_policy", "require_verified_receipt"]))
        {
            self.add(
                "memory_policy.write_policy.require_verified_receipt",
                Rule::MemoryWriteWithoutReceipt,
                "memory writes are allowed without `require_verified_receipt: true`".into(),
            );
        }
    }

    fn persona(&mut self, c: &Value, kind: &str) {
        let attached = is_true(get(c, "persona_attached")) || kind == "persona";
        let pmp = get(c, "persona_memory_policy");
        if attached && !pmp.is_some_and(|p| nonempty(Some(p))) {
            self.add(
                "persona_memory_policy",
                Rule::PersonaWithoutMemoryPolicy,
                "a persona-attached subagent must declare persona_memory_policy".into(),
            );
        }
        let Some(pmp) = pmp.filter(|p| attached || nonempty(Some(p))) else {
            return;
        };
        let tl = get(pmp, "tom_lite");
        if attached || tl.is_some() {
            let tl = tl.unwrap_or(&Value::Null);
            if !is_denied(get(tl, "freeform_tom_tags")) {
                self.add(
                    "persona_memory_policy.tom_lite.freeform_tom_tags",
                    Rule::FreeformTomTagsAllowed,
                    "free-form ToM tags must be `denied`".into(),
                );
            }
            if !is_true(get(tl, "controlled_vocabulary")) {
                self.add(
                    "persona_memory_policy.tom_lite.controlled_vocabulary",
                    Rule::FreeformTomTagsAllowed,
                    "ToM-lite must use the controlled vocabulary (`controlled_vocabulary: true`)"
                        .into(),
                );
            }
        }
        let gp = get(pmp, "graph_policy").unwrap_or(&Value::Null);
        for key in [
            "direct_graph_edge_creation_by_subagent",
            "direct_graph_access",
        ] {
            if !is_denied(get(gp, key)) {
                self.add(
                    &format!("persona_memory_policy.graph_policy.{key}"),
                    Rule::GraphEdgeCreationAllowed,
                    format!("`{key}` must be `denied`: subagents do not create graph edges"),
                );
            }
        }
    }

    fn helpers(&mut self, c: &Value) {
        let Some(Value::Array(hs)) = get(c, "delegated_access_skills") else {
            return;
        };
        for (i, h) in hs.iter().enumerate() {
            let p = format!("delegated_access_skills[{i}]");
            let skill = get(h, "skill").and_then(Value::as_str).unwrap_or("?");
            for key in ["owner", "access_mode", "forbidden_actions"] {
                if !nonempty(get(h, key)) {
                    self.add(
                        &join(&p, key),
                        Rule::HelperAccessIncomplete,
                        format!("helper access to `{skill}` lacks {key}"),
                    );
                }
            }
            if !nonempty(get(h, "required_receipts")) && !is_true(get(h, "receipt_required")) {
                self.add(
                    &join(&p, "required_receipts"),
                    Rule::HelperAccessWithoutReceipts,
                    format!("helper access to `{skill}` does not require receipts"),
                );
            }
        }
    }

    fn retries(&mut self, c: &Value) {
        let Some(rp) = get(c, "retry_policy") else {
            return; // missing_section
        };
        let loops: Vec<(&String, &Value)> = rp
            .as_object()
            .map(|o| o.iter().filter(|(_, v)| v.is_object()).collect())
            .unwrap_or_default();
        if loops.is_empty() {
            self.add(
                "retry_policy",
                Rule::RetryDefaultMissing,
                "retry_policy declares no retry loop with default_max_attempts".into(),
            );
        }
        for (name, l) in loops {
            let p = format!("retry_policy.{name}");
            if matches!(get(l, "unlimited_retries"), Some(v) if !is_denied(Some(v))) {
                self.add(
                    &join(&p, "unlimited_retries"),
                    Rule::RetryUnbounded,
                    "unlimited retries must be `denied`".into(),
                );
            }
            for key in [
                "default_max_attempts",
                "absolute_max_attempts",
                "max_attempts",
            ] {
                if let Some(v) = get(l, key)
                    && v.as_f64().is_none_or(|x| !x.is_finite() || x < 0.0)
                {
                    self.add(
                        &join(&p, key),
                        Rule::RetryUnbounded,
                        format!("{key} must be a finite number of attempts, found {v}"),
                    );
                }
            }
            if number(get(l, "absolute_max_attempts")).is_none()
                && number(get(l, "max_attempts")).is_none()
                && number(get(l, "default_max_attempts")).is_none()
            {
                self.add(
                    &p,
                    Rule::RetryUnbounded,
                    "the retry loop has no attempt limit".into(),
                );
            }
            if number(get(l, "default_max_attempts")).is_none() {
                self.add(
                    &join(&p, "default_max_attempts"),
                    Rule::RetryDefaultMissing,
                    "the retry loop omits default_max_attempts".into(),
                );
            }
            if matches!(get(l, "subagent_self_override"), Some(v) if !is_denied(Some(v)))
                || get(l, "subagent_self_override").is_none()
                    && get(l, "override_allowed_by").is_some()
            {
                self.add(
                    &join(&p, "subagent_self_override"),
                    Rule::RetrySelfOverride,
                    "subagent_self_override must be `denied`".into(),
                );
            }
            for who in strings(get(l, "override_allowed_by")) {
                if who != "human" && who != "project_agent" {
                    self.add(
                        &join(&p, "override_allowed_by"),
                        Rule::RetrySelfOverride,
                        format!("only human or project_agent may override the budget, not `{who}`"),
                    );
                }
            }
            let def = number(get(l, "default_max_attempts"));
            let abs = number(get(l, "absolute_max_attempts")).or(number(get(l, "max_attempts")));
            if name == "inner_loop" {
                for (key, v) in [
                    ("default_max_attempts", def),
                    ("absolute_max_attempts", abs),
                ] {
                    if let Some(v) = v.filter(|v| *v > 4.0)
                        && !approved(l, v)
                    {
                        self.add(
                            &join(&p, key),
                            Rule::InnerLoopMaxAbove4,
                            format!("inner loop {key} {v} exceeds 4 without an explicit exception"),
                        );
                    }
                }
            } else {
                if let Some(v) = def.filter(|v| *v > 3.0)
                    && !approved(l, v)
                {
                    self.add(
                        &join(&p, "default_max_attempts"),
                        Rule::RetryDefaultAbove3,
                        format!("default_max_attempts {v} is above 3 without an explicit human/project_agent override"),
                    );
                }
                if let Some(v) = abs.filter(|v| *v > 4.0)
                    && !approved(l, v)
                {
                    self.add(
                        &join(&p, "absolute_max_attempts"),
                        Rule::RetryAbsoluteMaxAbove4,
                        format!(
                            "absolute_max_attempts {v} exceeds 4 without an explicit exception"
                        ),
                    );
                }
            }
        }
    }
}

/// Whether memory writes are allowed: a write endpoint or tool, or a write
/// policy whose default is not denied or that has exceptions.
fn memory_writes_allowed(mp: &Value, allowed: &[(String, &str)]) -> bool {
    let writes = ["store", "upsert", "delete"];
    strings(get(mp, "allowed_endpoints"))
        .iter()
        .any(|e| writes.contains(e))
        || allowed.iter().any(|(_, t)| {
            t.strip_prefix("memory.")
                .is_some_and(|e| writes.contains(&e))
        })
        || get(mp, "write_policy")
            .is_some_and(|w| !is_denied(get(w, "default")) || nonempty(get(w, "exceptions")))
}

/// Whether a retry block carries an explicit override/exception for `value` attempts.
fn approved(l: &Value, value: f64) -> bool {
    ["override", "exception"].iter().any(|k| {
        get(l, k).is_some_and(|o| {
            matches!(
                get(o, "approved_by").and_then(Value::as_str),
                Some("human" | "project_agent")
            ) && number(get(o, "max_attempts")).is_some_and(|m| m >= value)
                && nonempty(get(o, "reason"))
                && nonempty(get(o, "updated_stop_condition"))
        })
    })
}

/// The JSON Schema (draft 2020-12) of a subagent contract.
pub fn schema() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let attempts = json!({"type": "integer", "minimum": 0});
    let approval = json!({
        "type": "object",
        "required": ["approved_by", "max_attempts", "reason", "updated_stop_condition"],
        "properties": {
            "approved_by": {"enum": ["human", "project_agent"]},
            "max_attempts": attempts,
            "reason": {"type": "string", "minLength": 1},
            "updated_stop_condition": {"type": "string", "minLength": 1}
        }
    });
    let retry_loop = json!({
        "type": "object",
        "required": ["default_max_attempts"],
        "properties": {
            "applies_to": {},
            "default_max_attempts": attempts,
            "absolute_max_attempts": attempts,
            "override_allowed_by": {"type": "array", "items": {"enum": ["human", "project_agent"]}},
            "override_requires": strings,
            "subagent_self_override": {"const": "denied"},
            "unlimited_retries": {"const": "denied"},
            "retry_requires_one_of": strings,
            "stop_immediately_on": strings,
            "override": approval,
            "exception": approval
        }
    });
    let preflight = json!({
        "type": "object",
        "required": ["required", "packet_fields"],
        "properties": {
            "required": {"const": true},
            "packet_fields": {"type": "array", "items": {"type": "string"},
                "allOf": PREFLIGHT_FIELDS.iter().map(|f| json!({"contains": {"const": f}})).collect::<Vec<_>>()}
        }
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "tomlite:subagent-contract",
        "title": "Subagent contract (oc_subagent.persona.v1)",
        "type": "object",
        "required": REQUIRED_SECTIONS,
        "not": {"required": ["cannot"]},
        "properties": {
            "schema": {"type": "string"},
            "id": {"type": "string", "minLength": 1},
            "kind": {"enum": KINDS},
            "display_name": {"type": "string"},
            "role": {"type": "string"},
            "persona_attached": {"type": "boolean"},
            "does_not_own": strings,
            "primary_skills": strings,
            "dag_spec": {
                "type": "object",
                "required": ["schema", "mode", "nodes", "start_gate"],
                "properties": {
                    "schema": {"const": "subagent_dag.v1"},
                    "mode": {"enum": DAG_MODES},
                    "description": {"type": "string"},
                    "inputs_required": strings,
                    "nodes": {"type": "array", "minItems": 1, "items": {
                        "type": "object",
                        "required": ["id", "kind", "receipts", "stop_conditions"],
                        "properties": {
                            "id": {"type": "string"},
                            "kind": {"type": "string"},
                            "spends": {"type": "boolean"},
                            "receipts": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                            "stop_conditions": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                            "prompt_preflight": preflight
                        }
                    }},
                    "edges": {"type": "array"},
                    "receipt_policy": {"type": "object"},
                    "start_gate": {"type": "object", "required": ["require_dag_spec_before_work"],
                        "properties": {"require_dag_spec_before_work": {"const": true},
                                       "reject_prose_only_work_orders": {"type": "boolean"}}},
                    "prompt_preflight": preflight,
                    "loop_policy": {"type": "object",
                        "required": ["max_attempts", "mutation_policy", "classifier_gate", "stop_conditions"],
                        "properties": {"max_attempts": attempts, "max_cost_usd": {"type": "number"},
                            "mutation_policy": {"type": "object", "minProperties": 1},
                            "classifier_gate": {"type": "object", "minProperties": 1},
                            "stop_conditions": {"type": "array", "minItems": 1}}}
                }
            },
            "tool_policy": {
                "type": "object",
                "properties": {
                    "allowed": strings,
                    "denied": strings,
                    "bash": {"type": "object", "required": ["tier"],
                        "properties": {"tier": {"enum": BASH_TIERS}, "allowed_commands": strings, "denied_commands": strings}},
                    "filesystem": {"type": "object"},
                    "skill_calls": {"type": "object", "properties": {"mode": {"enum": ["none", "dispatcher_only", "direct"]}}}
                }
            },
            "memory_policy": {
                "type": "object",
                "properties": {
                    "allowed_endpoints": strings,
                    "denied_endpoints": strings,
                    "allowed_collections": strings,
                    "preferred_collections": strings,
                    "denied_collections": strings,
                    "allowed_recall_profiles": strings,
                    "write_policy": {"type": "object", "properties": {
                        "default": {"type": "string"},
                        "exceptions": {"type": "array"},
                        "require_verified_receipt": {"type": "boolean"}}},
                    "response_modes": {"type": "object"}
                }
            },
            "persona_memory_policy": {
                "type": "object",
                "properties": {
                    "tom_lite": {"type": "object", "properties": {
                        "controlled_vocabulary": {"const": true},
                        "freeform_tom_tags": {"const": "denied"}}},
                    "graph_policy": {"type": "object", "properties": {
                        "direct_graph_access": {"const": "denied"},
                        "direct_graph_edge_creation_by_subagent": {"const": "denied"}}}
                }
            },
            "delegated_access_skills": {"type": "array", "items": {
                "type": "object",
                "required": ["skill", "owner", "access_mode", "forbidden_actions"],
                "anyOf": [{"required": ["required_receipts"]}, {"required": ["receipt_required"]}],
                "properties": {
                    "skill": {"type": "string"}, "owner": {"type": "string"}, "access_mode": {"type": "string"},
                    "forbidden_actions": {"type": "array", "minItems": 1},
                    "required_receipts": {"type": "array", "minItems": 1},
                    "receipt_required": {"const": true}
                }
            }},
            "status_reporting": {
                "type": "object",
                "required": ["required", "recipient", "cadence", "event_fields", "timeout_diagnostics"],
                "properties": {
                    "required": {"const": true},
                    "recipient": {"const": "project_agent"},
                    "cadence": strings,
                    "stream_modes": strings,
                    "event_fields": {"type": "array", "items": {"type": "string"},
                        "allOf": STATUS_EVENT_FIELDS.iter().map(|f| json!({"contains": {"const": f}})).collect::<Vec<_>>()},
                    "timeout_diagnostics": {"type": "object", "minProperties": 1}
                }
            },
            "retry_policy": {"type": "object", "minProperties": 1, "additionalProperties": retry_loop},
            "turn_contract": {"type": "object"},
            "help_policy": {"type": "object"},
            "output_contract": {"type": "object"},
            "artifact_contract": {"type": "object"},
            "proof_tasks": {"type": "array"}
        }
    })
}

/// The JSON type of a value, for messages ("a string", "an array").
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<&'static str> {
        let mut r: Vec<&str> = lint_str("t.yaml", yaml)
            .iter()
            .map(|f| f.rule.id())
            .collect();
        r.dedup();
        r
    }

    #[test]
    fn yaml_reads_into_a_value_tree() {
        let v: Value =
            serde_saphyr::from_str("a: [1, x]\nb: {c: true}\nkind: persona | worker\n").unwrap();
        assert_eq!(v["a"][1], "x");
        assert_eq!(v["b"]["c"], true);
        assert_eq!(v["kind"], "persona | worker");
    }

    #[test]
    fn not_yaml_or_not_a_mapping() {
        assert_eq!(rules("a: [1,"), ["yaml_unreadable"]);
        assert_eq!(rules("- 1\n- 2\n"), ["yaml_unreadable"]);
    }

    #[test]
    fn cannot_is_found_at_any_depth() {
        let f = lint_str("t.yaml", "tool_policy:\n  x:\n    - cannot: [push]\n");
        let c: Vec<&Finding> = f.iter().filter(|f| f.rule == Rule::CannotField).collect();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].path, "tool_policy.x[0].cannot");
    }

    #[test]
    fn retry_limits_and_their_approvals() {
        let base = "retry_policy:\n  bounded_iterative:\n    default_max_attempts: 5\n    absolute_max_attempts: 6\n    override_allowed_by: [human]\n    subagent_self_override: denied\n    unlimited_retries: denied\n";
        let r = rules(base);
        assert!(
            r.contains(&"retry_default_above_3") && r.contains(&"retry_absolute_max_above_4"),
            "{r:?}"
        );
        let ok = format!(
            "{base}    override:\n      approved_by: human\n      max_attempts: 6\n      reason: long search\n      updated_stop_condition: six attempts\n"
        );
        let r = rules(&ok);
        assert!(
            !r.contains(&"retry_default_above_3") && !r.contains(&"retry_absolute_max_above_4"),
            "{r:?}"
        );
        let r = rules(
            "retry_policy:\n  inner_loop:\n    default_max_attempts: 3\n    absolute_max_attempts: 9\n    subagent_self_override: allowed\n",
        );
        assert!(
            r.contains(&"inner_loop_max_above_4") && r.contains(&"retry_self_override"),
            "{r:?}"
        );
    }

    #[test]
    fn schema_requires_the_linters_sections() {
        let s = schema();
        let req: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(req, REQUIRED_SECTIONS);
        assert_eq!(
            s["properties"]["tool_policy"]["properties"]["bash"]["properties"]["tier"]["enum"],
            json!(BASH_TIERS)
        );
    }

    #[test]
    fn rule_ids_are_unique() {
        let mut ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), Rule::ALL.len());
    }
}
