//! The policy file as written: the seed's layout (`persona_memory_policy:`
//! with the ToM-lite and classifier blocks under it) or the flat one, parsed
//! with every error at its key path, and the seed's fixed values checked.

use super::*;

/// The seed's `persona_memory_policy:` block as a file may hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct PersonaBlock {
    pub(super) required_when_persona_attached: bool,
    pub(super) persona_id_field: String,
    pub(super) allowed_collections: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tom_lite: Option<TomLite>,
    pub(super) graph_policy: GraphPolicy,
    pub(super) intensity_policy: IntensityPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) classifier_policy: Option<ClassifierPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sensitive_content: Option<SensitiveContent>,
}

/// A policy file in either layout.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct PolicyFile {
    pub(super) persona_memory_policy: Option<PersonaBlock>,
    pub(super) tom_lite: Option<TomLite>,
    pub(super) tom_lite_promotion_policy: PromotionPolicy,
    pub(super) classifier_policy: Option<ClassifierPolicy>,
    pub(super) run: RunPolicy,
}

/// The effective policy in the seed's layout, for `tomlite policy`.
#[derive(Serialize)]
pub(super) struct SeedLayout<'a> {
    pub(super) persona_memory_policy: PersonaBlock,
    pub(super) tom_lite_promotion_policy: &'a PromotionPolicy,
    pub(super) run: &'a RunPolicy,
}

pub(super) const SEED_COLLECTIONS: [&str; 7] = [
    "personas",
    "persona_memory",
    "persona_memory_edges",
    "persona_states",
    "user_agent_relationships",
    "user_lessons",
    "tom_edges",
];

pub(super) const SEED_INTENSITY_USES: [&str; 5] = [
    "retrieval_reranking",
    "graph_traversal_weight",
    "salience",
    "response_tone",
    "continuity_priority",
];

pub(super) const SEED_INTENSITY_NEVER: [&str; 4] = [
    "truth_claims",
    "evidence_sufficiency",
    "compliance_approval",
    "permission_to_act",
];

impl Default for PersonaBlock {
    fn default() -> Self {
        Self {
            required_when_persona_attached: true,
            persona_id_field: "active_domain_persona".into(),
            allowed_collections: strings(&SEED_COLLECTIONS),
            tom_lite: None,
            graph_policy: GraphPolicy::default(),
            intensity_policy: IntensityPolicy::default(),
            classifier_policy: None,
            sensitive_content: None,
        }
    }
}

/// `list` must hold exactly the items of `seed`, in any order.
pub(super) fn same_set(
    key: &str,
    list: &[String],
    seed: &[&str],
    why: &str,
) -> Result<(), (String, String)> {
    for (i, x) in list.iter().enumerate() {
        if !seed.contains(&x.as_str()) {
            return Err((
                format!("{key}[{i}]"),
                format!(
                    "`{x}` is not in the seed's list ({}); {why}",
                    seed.join(", ")
                ),
            ));
        }
        if list[..i].contains(x) {
            return Err((format!("{key}[{i}]"), format!("`{x}` is listed twice")));
        }
    }
    for x in seed {
        if !list.iter().any(|l| l == x) {
            return Err((key.to_string(), format!("must list `{x}`; {why}")));
        }
    }
    Ok(())
}

impl PersonaBlock {
    /// The memory service's keys hold the seed's values; returns (key path, message).
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        const P: &str = "persona_memory_policy";
        let seed = Self::default();
        let fixed = |key: &str, ok: bool, expected: &str, why: &str| {
            if ok {
                Ok(())
            } else {
                Err((format!("{P}.{key}"), format!("must be {expected}: {why}")))
            }
        };
        fixed(
            "required_when_persona_attached",
            self.required_when_persona_attached,
            "true",
            "every persona-attached worker keeps this memory policy",
        )?;
        fixed(
            "persona_id_field",
            self.persona_id_field == seed.persona_id_field,
            "`active_domain_persona`",
            "the memory service's field; tomlite reads each record's `persona_id`",
        )?;
        same_set(
            &format!("{P}.allowed_collections"),
            &self.allowed_collections,
            &SEED_COLLECTIONS,
            "tomlite writes no collection (only its staging directory), so only the seed's list is accepted",
        )?;
        let g = &self.graph_policy;
        let memory_service = "tomlite writes no graph edge and traverses nothing (it stages one-hop edge candidates for a curator); this key belongs to the memory service, so only the seed's value is accepted";
        fixed(
            "graph_policy.graph_connections_remain",
            g.graph_connections_remain,
            "true",
            memory_service,
        )?;
        fixed(
            "graph_policy.traversal_owner",
            g.traversal_owner == "memory_service",
            "`memory_service`",
            memory_service,
        )?;
        fixed(
            "graph_policy.direct_graph_access",
            g.direct_graph_access == "denied",
            "`denied`",
            "tomlite never reads or writes the graph directly",
        )?;
        fixed(
            "graph_policy.direct_graph_edge_creation_by_subagent",
            g.direct_graph_edge_creation_by_subagent == "denied",
            "`denied`",
            "tomlite only stages edge candidates; a curator promotes them",
        )?;
        fixed(
            "graph_policy.require_source_paths",
            g.require_source_paths,
            "true",
            "every record needs its `source_path` (ingest rejects a record without one)",
        )?;
        fixed(
            "graph_policy.max_hops_default",
            g.max_hops_default == 2,
            "2",
            memory_service,
        )?;
        fixed(
            "graph_policy.max_hops_without_project_agent_approval",
            g.max_hops_without_project_agent_approval == 3,
            "3",
            memory_service,
        )?;
        let why = "tomlite promotes on a label's confidence, never on the intensity itself, so only the seed's list is accepted";
        same_set(
            &format!("{P}.intensity_policy.use_for"),
            &self.intensity_policy.use_for,
            &SEED_INTENSITY_USES,
            why,
        )?;
        same_set(
            &format!("{P}.intensity_policy.must_not_use_for"),
            &self.intensity_policy.must_not_use_for,
            &SEED_INTENSITY_NEVER,
            why,
        )?;
        Ok(())
    }
}

/// Which blocks a policy file put under `persona_memory_policy` (the seed's
/// layout) rather than at the top level.
#[derive(Debug, Default)]
pub(super) struct NestedBlocks {
    pub(super) tom_lite: bool,
    pub(super) classifier_policy: bool,
}

impl NestedBlocks {
    /// `key` (a path in the effective policy) as the file wrote it.
    pub(super) fn where_written(&self, key: String) -> String {
        let under = |block: &str| {
            key == block
                || key.starts_with(&format!("{block}."))
                || key.starts_with(&format!("{block}["))
        };
        if (self.tom_lite && under("tom_lite"))
            || (self.classifier_policy && under("classifier_policy"))
        {
            format!("persona_memory_policy.{key}")
        } else {
            key
        }
    }
}

impl PolicyFile {
    /// YAML to a generic tree first, then the tree to the typed file through
    /// serde_path_to_error, so that every error knows its key path.
    pub(super) fn parse(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let tree: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_saphyr::from_str(text).map_err(|error| PolicyError::Yaml {
                path: path.to_path_buf(),
                message: error.to_string(),
            })?
        };
        let tree = if tree.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            tree
        };
        serde_path_to_error::deserialize(tree).map_err(|error| {
            let key = error.path().to_string();
            PolicyError::Key {
                path: path.to_path_buf(),
                key: if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                message: error.inner().to_string(),
            }
        })
    }

    /// The effective policy (not yet checked) and where its blocks were
    /// written; the persona block's own keys are checked here; returns
    /// (key path, message).
    pub(super) fn into_policy(self) -> Result<(Policy, NestedBlocks), (String, String)> {
        let mut nested = NestedBlocks::default();
        let mut tom_lite = self.tom_lite;
        let mut classifier_policy = self.classifier_policy;
        let mut sensitive_content = None;
        if let Some(block) = self.persona_memory_policy {
            sensitive_content = block.sensitive_content.clone();
            block.check()?;
            nested.tom_lite = nested_once("tom_lite", &tom_lite, &block.tom_lite)?;
            nested.classifier_policy = nested_once(
                "classifier_policy",
                &classifier_policy,
                &block.classifier_policy,
            )?;
            tom_lite = tom_lite.or(block.tom_lite);
            classifier_policy = classifier_policy.or(block.classifier_policy);
        }
        let policy = Policy {
            tom_lite: tom_lite.unwrap_or_default(),
            tom_lite_promotion_policy: self.tom_lite_promotion_policy,
            classifier_policy: classifier_policy.unwrap_or_default(),
            run: self.run,
            persona_memory_policy: PersonaMemoryPolicy {
                sensitive_content: sensitive_content.unwrap_or_default(),
            },
        };
        Ok((policy, nested))
    }
}

/// Whether block `name` is given under `persona_memory_policy`; an error
/// when it is given there and at the top level too.
pub(super) fn nested_once<T>(
    name: &str,
    top_level: &Option<T>,
    under_persona: &Option<T>,
) -> Result<bool, (String, String)> {
    if top_level.is_some() && under_persona.is_some() {
        return Err((
            name.into(),
            "given both at the top level and under persona_memory_policy; keep one (the seed's layout has it under persona_memory_policy)".into(),
        ));
    }
    Ok(under_persona.is_some())
}

impl Policy {
    /// Parses and checks policy YAML; `path` is only used in messages.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Self, PolicyError> {
        let key_error = |key: String, message: String| PolicyError::Key {
            path: path.to_path_buf(),
            key,
            message,
        };
        let file = PolicyFile::parse(text, path)?;
        let (policy, nested) = file
            .into_policy()
            .map_err(|(key, message)| key_error(key, message))?;
        policy
            .check()
            .map_err(|(key, message)| key_error(nested.where_written(key), message))?;
        Ok(policy)
    }

    /// The effective policy as YAML in the seed's layout, ready to paste
    /// into `tomlite.yaml`.
    pub fn to_yaml(&self) -> String {
        let layout = SeedLayout {
            persona_memory_policy: PersonaBlock {
                tom_lite: Some(self.tom_lite.clone()),
                classifier_policy: Some(self.classifier_policy.clone()),
                sensitive_content: Some(self.persona_memory_policy.sensitive_content.clone()),
                ..PersonaBlock::default()
            },
            tom_lite_promotion_policy: &self.tom_lite_promotion_policy,
            run: &self.run,
        };
        serde_saphyr::to_string(&layout).expect("a policy always serialises")
    }
}

impl Default for IntensityPolicy {
    fn default() -> Self {
        Self {
            use_for: strings(&SEED_INTENSITY_USES),
            must_not_use_for: strings(&SEED_INTENSITY_NEVER),
        }
    }
}
