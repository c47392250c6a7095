//! The JSON Schema of a subagent contract (`tomlite contract schema`).

use serde_json::{Value, json};

use crate::{
    BASH_TIERS, DAG_MODES, KINDS, PREFLIGHT_FIELDS, REQUIRED_SECTIONS, STATUS_EVENT_FIELDS,
};

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
