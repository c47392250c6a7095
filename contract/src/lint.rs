//! The linter: each section of a contract checked against the rules
//! ([`crate::Rule`]), findings gathered by path.

use serde_json::Value;

use crate::{
    BASH_TIERS, DIRECT_DB, Finding, KINDS, PREFLIGHT_FIELDS, REQUIRED_SECTIONS, Rule,
    STATUS_EVENT_FIELDS,
};

pub(crate) struct Linter<'a> {
    /// The file, as findings name it.
    pub(crate) file: &'a str,
    /// The findings so far.
    pub(crate) out: Vec<Finding>,
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
    pub(crate) fn add(&mut self, path: &str, rule: Rule, message: String) {
        self.out.push(Finding {
            file: self.file.to_string(),
            path: path.to_string(),
            rule,
            severity: rule.severity(),
            message,
        });
    }

    pub(crate) fn contract(&mut self, c: &Value) {
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
