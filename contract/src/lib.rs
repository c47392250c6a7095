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
use serde_json::Value;

mod lint;
mod schema;

use lint::Linter;
pub use schema::schema;

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
    use serde_json::json;

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
