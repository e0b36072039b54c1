//! The published contract (`/openapi.json`, `openapi/openapi.json`): the document clients generate
//! from, and the schemas request bodies are checked against.
//!
//! utoipa derives one schema per Rust type from its serde attributes. Generated clients need more
//! than that derivation says, so [`publish`] finishes the document in one pass:
//! - **Inputs and outputs differ.** A type both sent and received gets two schemas: `X`, as the
//!   server writes it (every field present: the server never skips one, so response types have no
//!   optional fields), and `XInput`, as a client may send it (fields with defaults optional).
//! - **No `default` keyword in inputs.** openapi-typescript makes a field with a default required,
//!   so the default is stated in the field's description instead.
//! - **No single-item `oneOf`.** utoipa wraps a `$ref` in one to attach a description or default;
//!   openapi-python-client drops such schemas. The `$ref` is used directly.
//! - **The server's own rules.** Every string, number, list and map of an input carries the bounds
//!   and pattern the server enforces ([`FIELD_RULES`], [`parameter_rule`]); request bodies are
//!   checked against these very schemas ([`super::extract::ApiJson`]), so a body the spec calls
//!   valid is one the server's schema check accepts and vice versa.
//! - **Responses say what comes back.** Each error response shows an example of that error,
//!   every response documents `x-request-id`, 429 and 503 document `Retry-After`; every operation
//!   that may be shed says so in its 503.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::cluster::names::{
    grain_id_pattern, grain_type_pattern, DNS_LABEL_PATTERN, MAX_GRAIN_ID_CHARS,
    MAX_GRAIN_TYPE_CHARS, MAX_SILO_ID_CHARS,
};
use crate::validation::{label_pattern, token_pattern, MAX_SAFE_INTEGER};

use super::heartbeats as beat;

const SCHEMA_REF: &str = "#/components/schemas/";
/// Suffix of the schema a client sends when it differs from the one the server writes.
pub const INPUT_SUFFIX: &str = "Input";

/// Finishes the document utoipa derived (see the module docs).
pub fn publish(mut doc: Value) -> Value {
    visit_objects(&mut doc, &mut unwrap_single_one_of);
    split_inputs_from_outputs(&mut doc);
    apply_field_rules(&mut doc);
    apply_parameter_rules(&mut doc);
    title_union_variants(&mut doc);
    declare_credentials(&mut doc);
    document_load_shedding(&mut doc);
    document_responses(&mut doc);
    link_operations(&mut doc);
    doc["info"]["license"] =
        json!({"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"});
    doc["servers"] = json!([{"url": "/", "description": "The oracle serving this document"}]);
    doc
}

/// Calls `f` on every JSON object, innermost first.
fn visit_objects(value: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                visit_objects(child, f);
            }
            f(map);
        }
        Value::Array(items) => items.iter_mut().for_each(|item| visit_objects(item, f)),
        _ => {}
    }
}

/// `{"oneOf": [X], …}` becomes X with the other keys beside it.
fn unwrap_single_one_of(map: &mut Map<String, Value>) {
    let single = matches!(map.get("oneOf"), Some(Value::Array(items)) if items.len() == 1);
    if !single {
        return;
    }
    let Some(Value::Array(mut items)) = map.remove("oneOf") else {
        return;
    };
    if let Value::Object(inner) = items.remove(0) {
        for (key, value) in inner {
            map.entry(key).or_insert(value);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server's rules, stated in the schemas.

/// A free-form label: printable, 1 to `max` characters.
fn label(max: usize) -> Value {
    json!({"minLength": 1, "maxLength": max, "pattern": label_pattern()})
}

/// A label that may also be empty.
fn optional_label(max: usize) -> Value {
    json!({"maxLength": max, "pattern": label_pattern().replace("]+$", "]*$")})
}

/// An identifier: printable, no white space, 1 to `max` characters.
fn token(max: usize) -> Value {
    json!({"minLength": 1, "maxLength": max, "pattern": token_pattern("")})
}

fn silo_id() -> Value {
    token(MAX_SILO_ID_CHARS)
}

fn grain_id() -> Value {
    json!({"minLength": 3, "maxLength": MAX_GRAIN_ID_CHARS, "pattern": grain_id_pattern()})
}

fn grain_type() -> Value {
    json!({"minLength": 1, "maxLength": MAX_GRAIN_TYPE_CHARS, "pattern": grain_type_pattern()})
}

fn dns_label() -> Value {
    json!({"minLength": 1, "maxLength": 63, "pattern": DNS_LABEL_PATTERN})
}

fn range(min: i64, max: u64) -> Value {
    json!({"minimum": min, "maximum": max})
}

fn metadata(max_entries: usize, min_entries: usize, value: Value) -> Value {
    json!({
        "minProperties": min_entries,
        "maxProperties": max_entries,
        "propertyNames": token(beat::MAX_METADATA_KEY_CHARS),
        "additionalProperties": value,
    })
}

/// Builds the JSON Schema keywords of a rule.
type Rules = fn() -> Value;

/// The rules of every input field, by schema and property; a schema name ending in `[]` means
/// every variant of that union. A test checks that no input string, number, list or map is left
/// without one.
const FIELD_RULES: &[(&str, &str, Rules)] = &[
    ("HeartbeatRequest", "silo", silo_id),
    ("HeartbeatRequest", "address", silo_id),
    ("HeartbeatRequest", "role", || label(beat::MAX_ROLE_CHARS)),
    ("HeartbeatRequest", "metadata", || {
        metadata(
            beat::MAX_METADATA_ENTRIES,
            0,
            optional_label(beat::MAX_METADATA_VALUE_CHARS),
        )
    }),
    (
        "HeartbeatRequest",
        "grain_types",
        || json!({"maxItems": beat::MAX_GRAIN_TYPES, "items": grain_type()}),
    ),
    ("HeartbeatRequest", "cpu_usage", || range(0, 100)),
    ("HeartbeatRequest", "memory_usage_bytes", safe_count),
    ("HeartbeatRequest", "max_available_memory_bytes", safe_count),
    ("HeartbeatRequest", "activation_count", safe_count),
    ("HeartbeatRequest", "recent_activation_count", safe_count),
    ("HeartbeatRequest", "connection_count", safe_count),
    ("HeartbeatRequest", "network_bytes_per_second", safe_count),
    ("PlacementRequest", "grain", grain_id),
    ("PlacementRequest", "requesting_silo", silo_id),
    ("PlacementRequest", "hint", silo_id),
    ("PlacementPreviewRequest", "grain", grain_id),
    ("PlacementPreviewRequest", "requesting_silo", silo_id),
    ("PlacementPreviewRequest", "hint", silo_id),
    (
        "PlacementBatchRequest",
        "placements",
        || json!({"minItems": 1, "maxItems": super::placements::MAX_BATCH}),
    ),
    ("Policy", "silo_ttl_ms", || range(100, 86_400_000)),
    ("Policy", "migration_ttl_ms", || range(1_000, 86_400_000)),
    ("RebalancerOptions", "due_time_ms", || range(0, 86_400_000)),
    ("RebalancerOptions", "session_cycle_period_ms", || {
        range(2_000, 86_400_000)
    }),
    ("RebalancerOptions", "max_stagnant_cycles", || {
        unsigned_32(1)
    }),
    ("RebalancerOptions", "entropy_quantum", || above_zero(0.1)),
    ("RebalancerOptions", "allowed_entropy_deviation", || {
        above_zero(0.1)
    }),
    (
        "RebalancerOptions",
        "scaled_entropy_deviation_activation_threshold",
        || range(1_000, MAX_SAFE_INTEGER),
    ),
    ("RebalancerOptions", "cycle_number_weight", || {
        above_zero(1.0)
    }),
    ("RebalancerOptions", "silo_number_weight", || range(0, 1)),
    (
        "RebalancerOptions",
        "activation_migration_count_limit",
        || range(1, MAX_SAFE_INTEGER),
    ),
    ("SuspendRequest", "duration_ms", || range(1, 604_800_000)),
    (
        "EdgeBatch",
        "edges",
        || json!({"minItems": 1, "maxItems": super::repartitioner::MAX_EDGES}),
    ),
    ("Edge", "from", grain_id),
    ("Edge", "to", grain_id),
    ("Edge", "count", || {
        range(1, super::repartitioner::MAX_EDGE_COUNT)
    }),
    ("RepartitionerOptions", "max_edge_count", || {
        range(1, u64::from(crate::repartitioner::options::MAX_EDGE_COUNT))
    }),
    ("RepartitionerOptions", "max_unprocessed_edges", || {
        range(
            1,
            u64::from(crate::repartitioner::options::MAX_UNPROCESSED_EDGES),
        )
    }),
    ("RepartitionerOptions", "min_round_period_ms", || {
        range(1, 86_400_000)
    }),
    ("RepartitionerOptions", "max_round_period_ms", || {
        range(1, 86_400_000)
    }),
    ("RepartitionerOptions", "recovery_period_ms", || {
        range(0, 86_400_000)
    }),
    (
        "RepartitionerOptions",
        "probabilistic_filtering_max_allowed_error_rate",
        || json!({"minimum": 0.001, "maximum": 0.01}),
    ),
    ("RepartitionerOptions", "max_imbalance_percent", || {
        range(1, 100)
    }),
    (
        "Policy",
        "grain_types",
        || json!({"maxProperties": crate::policy::MAX_GRAIN_TYPES, "propertyNames": grain_type()}),
    ),
    ("GrainTypePolicy", "filters", || json!({"maxItems": 16})),
    ("ResourceOptimizedOptions", "cpu_usage_weight", percent),
    ("ResourceOptimizedOptions", "memory_usage_weight", percent),
    (
        "ResourceOptimizedOptions",
        "available_memory_weight",
        percent,
    ),
    (
        "ResourceOptimizedOptions",
        "max_available_memory_weight",
        percent,
    ),
    (
        "ResourceOptimizedOptions",
        "activation_count_weight",
        percent,
    ),
    (
        "ResourceOptimizedOptions",
        "local_silo_preference_margin",
        percent,
    ),
    ("ActivationCountOptions", "choose_out_of", || {
        range(1, 1_000)
    }),
    ("StatelessWorkerOptions", "max_local", || unsigned_32(0)),
    ("ConsistentHashOptions", "load_factor_percent", || {
        range(100, 1_000)
    }),
    ("WebhookOptions", "url", || {
        json!({
            "maxLength": crate::placement::options::MAX_WEBHOOK_URL_CHARS,
            "pattern": format!("^https?://{}$", crate::validation::token_class("", "*")),
        })
    }),
    ("WebhookOptions", "timeout_ms", || range(1, 2_000)),
    (
        "Filter[]",
        "keys",
        || json!({"minItems": 1, "maxItems": crate::placement::filters::MAX_KEYS, "items": token(128)}),
    ),
    (
        "Filter[]",
        "order",
        || json!({"minimum": i32::MIN, "maximum": i32::MAX}),
    ),
    ("Filter[]", "min_candidates", || unsigned_32(1)),
    ("Pool", "ttl_seconds", || range(0, 3_600)),
    (
        "Members",
        "silos",
        || json!({"minItems": 1, "maxItems": 1_000, "items": silo_id()}),
    ),
    ("Members", "role", || label(128)),
    ("Members", "metadata", || metadata(16, 1, label(1_024))),
    (
        "NewKeyRequest",
        "scopes",
        || json!({"minItems": 1, "maxItems": 8}),
    ),
    ("NewKeyRequest", "label", || {
        optional_label(super::keys::MAX_LABEL_CHARS)
    }),
];

/// A `u32` from `min`: beyond `int32`, so its format says `int64`.
fn unsigned_32(min: i64) -> Value {
    json!({"minimum": min, "maximum": u32::MAX, "format": "int64"})
}

/// More than 0, at most `max` (Orleans' half-open ranges).
fn above_zero(max: f64) -> Value {
    json!({"exclusiveMinimum": 0, "maximum": max})
}

fn safe_count() -> Value {
    range(0, MAX_SAFE_INTEGER)
}

fn percent() -> Value {
    range(0, 100)
}

/// Rules of whole schemas (not of one field); a name ending in `[]` means every variant.
const SCHEMA_RULES: &[(&str, Rules)] = &[
    // At most one way of choosing members: no two of them set (a null one is unset, as in what
    // `GET …/pools/{pool}` writes back).
    ("Members", || {
        let set = |field: &str, kind: &str| json!({"required": [field], "properties": {field: {"type": kind}}});
        let (silos, role, metadata) = (
            set("silos", "array"),
            set("role", "string"),
            set("metadata", "object"),
        );
        json!({"not": {"anyOf": [
            {"allOf": [silos.clone(), role.clone()]},
            {"allOf": [silos, metadata.clone()]},
            {"allOf": [role, metadata]},
        ]}})
    }),
    // serde refuses unknown fields in a filter too (utoipa does not say so for enum variants).
    ("Filter[]", || json!({"additionalProperties": false})),
];

/// The input schemas a rule's target names: one schema, or each variant of a union (`Name[]`);
/// `NameInput` where the type's input and output differ.
fn targets<'d>(schemas: &'d mut Value, target: &str) -> Vec<&'d mut Value> {
    let (name, each_variant) = match target.strip_suffix("[]") {
        Some(union) => (union, true),
        None => (target, false),
    };
    let input = format!("{name}{INPUT_SUFFIX}");
    let name = if schemas.get(&input).is_some() {
        input
    } else {
        name.to_owned()
    };
    let Some(schema) = schemas.get_mut(&name) else {
        return Vec::new();
    };
    if each_variant {
        schema
            .get_mut("oneOf")
            .and_then(Value::as_array_mut)
            .map(|variants| variants.iter_mut().collect())
            .unwrap_or_default()
    } else {
        vec![schema]
    }
}

/// Merges `rules` into `target`, object by object (`items`, `additionalProperties` included).
fn merge(target: &mut Value, rules: Value) {
    match (target, rules) {
        (Value::Object(target), Value::Object(rules)) => {
            for (key, value) in rules {
                match target.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value)
                    }
                    _ => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, rules) => *target = rules,
    }
}

fn apply_field_rules(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    for (schema, property, rules) in FIELD_RULES {
        let mut found = false;
        for target in targets(schemas, schema) {
            let field = target
                .get_mut("properties")
                .and_then(|properties| properties.get_mut(*property));
            if let Some(field) = field {
                merge(field, rules());
                found = true;
            }
        }
        assert!(
            found,
            "a field rule names {schema}.{property}, which does not exist"
        );
    }
    for (schema, rules) in SCHEMA_RULES {
        for target in targets(schemas, schema) {
            merge(target, rules());
        }
    }
}

/// The rule of a path, query or header parameter, by name (the same name means the same thing in
/// every operation; `cursor` is a silo id, a migration id, a cluster name or a grain id, whichever
/// the list is ordered by).
fn parameter_rule(name: &str, path: &str) -> Option<Value> {
    Some(match name {
        "cluster" | "pool" => dns_label(),
        "silo" => silo_id(),
        "grain" => grain_id(),
        "cursor" if path.ends_with("/silos") => silo_id(),
        "cursor" if path == "/v1/clusters" => dns_label(),
        "cursor" if path.ends_with("/migrations") => range(0, MAX_SAFE_INTEGER),
        "id" => range(1, MAX_SAFE_INTEGER),
        "cursor" => label(crate::cluster::names::MAX_STORED_GRAIN_ID_CHARS),
        "limit" => range(1, u64::from(crate::validation::MAX_PAGE)),
        "epoch" => range(1, MAX_SAFE_INTEGER),
        "If-Match" => json!({"pattern": r#"^(\*|(W/)?"[0-9]{1,18}")$"#}),
        _ => return None,
    })
}

/// What Swagger UI pre-fills: the names the README's walk-through uses, so that trying the
/// operations in order (heartbeat, place, look up, deactivate) works as it is.
fn parameter_example(name: &str) -> Option<Value> {
    Some(match name {
        "cluster" => json!("demo"),
        "silo" => json!("10.0.0.5:11111@139000"),
        "epoch" => json!(1),
        "limit" => json!(100),
        _ => return None,
    })
}

fn apply_parameter_rules(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            let Some(parameters) = operation
                .get_mut("parameters")
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for parameter in parameters {
                let name = parameter["name"].as_str().unwrap_or_default().to_owned();
                if let Some(rules) = parameter_rule(&name, path) {
                    merge(&mut parameter["schema"], rules);
                }
                if parameter.get("example").is_none() {
                    if let Some(example) = parameter_example(&name) {
                        parameter["example"] = example;
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs and outputs.

/// Names of the schemas `roots` reach through `$ref`s.
fn reachable(schemas: &Map<String, Value>, roots: Vec<String>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut pending = roots;
    while let Some(name) = pending.pop() {
        if seen.insert(name.clone()) {
            if let Some(schema) = schemas.get(&name) {
                pending.extend(refs_in(schema));
            }
        }
    }
    seen
}

fn refs_in(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_refs(value, &mut found);
    found
}

fn collect_refs(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(SCHEMA_REF))
            {
                found.push(name.to_owned());
            }
            map.values().for_each(|child| collect_refs(child, found));
        }
        Value::Array(items) => items.iter().for_each(|child| collect_refs(child, found)),
        _ => {}
    }
}

/// Every operation of the document, mutable.
fn operations(doc: &mut Value) -> impl Iterator<Item = &mut Value> {
    doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .flat_map(|item| {
            item.as_object_mut()
                .into_iter()
                .flat_map(|m| m.values_mut())
        })
}

/// Whether a schema describes objects (directly or in a union): only those differ between input
/// and output.
fn has_properties(value: &Value) -> bool {
    value.get("properties").is_some()
        || value
            .get("oneOf")
            .and_then(Value::as_array)
            .is_some_and(|variants| variants.iter().any(has_properties))
}

fn split_inputs_from_outputs(doc: &mut Value) {
    let mut request_roots = Vec::new();
    let mut response_roots = Vec::new();
    for operation in operations(doc) {
        request_roots.extend(refs_in(&operation["requestBody"]));
        request_roots.extend(refs_in(&operation["parameters"]));
        response_roots.extend(refs_in(&operation["responses"]));
    }
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("the document has schemas");
    let inputs = reachable(schemas, request_roots);
    let outputs = reachable(schemas, response_roots);
    let both: BTreeSet<String> = inputs
        .intersection(&outputs)
        .filter(|name| schemas.get(*name).is_some_and(has_properties))
        .cloned()
        .collect();
    let input_name = |name: &str| format!("{name}{INPUT_SUFFIX}");

    for name in &both {
        let copy = schemas[name].clone();
        schemas.insert(input_name(name), copy);
    }
    let rename = |value: &mut Value| {
        visit_objects(value, &mut |map| {
            let target = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(SCHEMA_REF))
                .filter(|name| both.contains(*name))
                .map(|name| format!("{SCHEMA_REF}{}", input_name(name)));
            if let Some(target) = target {
                map.insert("$ref".into(), Value::String(target));
            }
        })
    };
    let names: Vec<String> = schemas.keys().cloned().collect();
    for name in names {
        let schema = schemas.get_mut(&name).expect("listed");
        let is_input_copy = name
            .strip_suffix(INPUT_SUFFIX)
            .is_some_and(|original| both.contains(original));
        if is_input_copy || (inputs.contains(&name) && !outputs.contains(&name)) {
            rename(schema);
            visit_objects(schema, &mut describe_default);
        } else if outputs.contains(&name) {
            if both.contains(&name) {
                // The example shows what a client sends; the output's is that, as stored.
                match (schema.get("example"), output_example(&name)) {
                    (Some(example), Some(as_written)) => {
                        schema["example"] = as_written(example.clone());
                    }
                    _ => {
                        schema.as_object_mut().map(|map| map.remove("example"));
                    }
                }
            }
            visit_objects(schema, &mut |map| {
                map.remove("default");
                if let Some(Value::Object(properties)) = map.get("properties") {
                    let required = properties.keys().cloned().map(Value::String).collect();
                    map.insert("required".into(), Value::Array(required));
                }
            });
        }
    }
    for operation in operations(doc) {
        if let Some(body) = operation.get_mut("requestBody") {
            rename(body);
        }
    }
}

/// How the server writes back a type it also reads: the input example, read and written again.
fn output_example(name: &str) -> Option<fn(Value) -> Value> {
    fn as_written<T: serde::de::DeserializeOwned + serde::Serialize>(example: Value) -> Value {
        let value: T = serde_json::from_value(example).expect("the example is a valid input");
        serde_json::to_value(value).expect("it serialises")
    }
    match name {
        "Policy" => Some(as_written::<crate::policy::Policy>),
        "Pool" => Some(as_written::<crate::connect::Pool>),
        _ => None,
    }
}

/// Moves a `default` into the description.
fn describe_default(map: &mut Map<String, Value>) {
    let Some(default) = map.remove("default") else {
        return;
    };
    if default.is_null() {
        return;
    }
    let shown = match &default {
        Value::String(text) => format!("`{text}`"),
        Value::Object(fields) if fields.is_empty() => "none".to_owned(),
        Value::Array(items) if items.is_empty() => "none".to_owned(),
        Value::Object(_) => "each field's own default".to_owned(),
        other => format!("`{other}`"),
    };
    let description = map
        .get("description")
        .and_then(Value::as_str)
        .map_or(String::new(), |d| format!("{}\n\n", d.trim_end()));
    map.insert(
        "description".into(),
        Value::String(format!("{description}Default: {shown}.")),
    );
}

/// Gives each variant of a tagged union (`kind`) a title, so generators name it after its kind.
fn title_union_variants(doc: &mut Value) {
    let Some(schemas) = doc["components"]["schemas"].as_object_mut() else {
        return;
    };
    for (name, schema) in schemas.iter_mut() {
        let base = name.strip_suffix(INPUT_SUFFIX).unwrap_or(name);
        let suffix = &name[base.len()..];
        let Some(variants) = schema.get_mut("oneOf").and_then(Value::as_array_mut) else {
            continue;
        };
        for variant in variants {
            let kind = variant["properties"]["kind"]["enum"][0]
                .as_str()
                .map(pascal_case);
            if let Some(kind) = kind {
                variant["title"] = Value::String(format!("{kind}{base}{suffix}"));
            }
        }
    }
}

fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or(String::new(), |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Responses.

/// Any operation but health, readiness and metrics may be shed (503 `concurrency-limit-reached`,
/// see [`super::load_shedding`]): said here once for all of them rather than in every handler.
fn document_load_shedding(doc: &mut Value) {
    const SHED: &str = "this replica is at ORACLE_MAX_CONCURRENT_REQUESTS requests in flight";
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        if super::load_shedding::EXEMPT_PATHS.contains(&path.as_str()) {
            continue;
        }
        let operations = item
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut());
        for responses in operations.filter_map(|op| op.get_mut("responses")?.as_object_mut()) {
            let response = responses.entry("503").or_insert_with(|| {
                json!({
                    "description": "",
                    "content": {super::error::PROBLEM_JSON: {"schema": {"$ref": format!("{SCHEMA_REF}Problem")}}},
                })
            });
            let said = response["description"].as_str().unwrap_or_default();
            response["description"] = json!(match said.strip_suffix("; retry") {
                Some(cause) => format!("{cause}, or {SHED}; retry"),
                None if said.is_empty() =>
                    format!("{}{}; retry", SHED[..1].to_uppercase(), &SHED[1..]),
                None => format!("{said}; or {SHED}"),
            });
        }
    }
}

fn document_responses(doc: &mut Value) {
    for operation in operations(doc) {
        let operation_id = operation["operationId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Some(responses) = operation
            .get_mut("responses")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        for (status, response) in responses.iter_mut() {
            let headers = response["headers"]
                .as_object_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            let mut headers = Value::Object(headers);
            headers["x-request-id"] = json!({
                "description": "Identifies this request in the oracle's logs: the caller's own \
                                `x-request-id` when it sent one, a new UUID otherwise.",
                "schema": {"type": "string"},
            });
            if status == "429" || status == "503" {
                headers["Retry-After"] = json!({
                    "description": "Seconds to wait before retrying.",
                    "schema": {"type": "integer", "minimum": 1},
                });
            }
            response["headers"] = headers;
            let problem = response
                .get_mut("content")
                .and_then(|content| content.get_mut(super::error::PROBLEM_JSON));
            if let Some(problem) = problem {
                if let Some(example) = super::error::example_problem(&operation_id, status) {
                    problem["example"] = example;
                }
            }
        }
    }
}

/// The `bearer` security scheme, and 401 and 403 answers on every operation that asks for it.
/// Each operation's requirement names the role it needs (`silo`, `operator`, `admin`; none: any
/// key of the cluster), which is what `super::auth` enforces.
fn declare_credentials(doc: &mut Value) {
    doc["components"]["securitySchemes"][super::auth::SCHEME] = json!({
        "type": "http",
        "scheme": "bearer",
        "description": "A cluster key (`pok_…`, issued by the admin with `POST /v1/clusters/{cluster}/keys`) \
                        or the admin token. Each operation's requirement names the scope it needs: \
                        `silo`, `operator` or `admin` (the admin token); none means any key of the \
                        cluster. An oracle started without ORACLE_ADMIN_TOKEN (open mode, loopback \
                        only) asks for nothing.",
    });
    let problem = |description: &str| {
        json!({
            "description": description,
            "content": {super::error::PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        })
    };
    for operation in operations(doc) {
        if operation.get("security").is_none() {
            continue;
        }
        let responses = &mut operation["responses"];
        responses["401"] = problem("No credential, or not a valid one");
        responses["403"] = problem(
            "The credential does not allow this: another cluster's key, or a key without the scope",
        );
    }
}

/// How one answer leads to the next call. Swagger UI shows links; generators and fuzzers follow them.
struct Link {
    from: &'static str,
    status: &'static str,
    name: &'static str,
    to: &'static str,
    /// Each parameter of `to`, as a runtime expression over the first call.
    parameters: &'static [(&'static str, &'static str)],
}

const LINKS: &[Link] = &[
    Link {
        from: "post_placement",
        status: "200",
        name: "LookUp",
        to: "get_activation",
        parameters: &[
            ("cluster", "$request.path.cluster"),
            ("grain", "$response.body#/grain"),
        ],
    },
    Link {
        from: "post_placement",
        status: "200",
        name: "Deactivate",
        to: "delete_activation",
        parameters: &[
            ("cluster", "$request.path.cluster"),
            ("grain", "$response.body#/grain"),
            ("silo", "$response.body#/silo"),
            ("epoch", "$response.body#/epoch"),
        ],
    },
    Link {
        from: "put_pool",
        status: "200",
        name: "Connect",
        to: "post_connection",
        parameters: &[
            ("cluster", "$request.path.cluster"),
            ("pool", "$request.path.pool"),
        ],
    },
    Link {
        from: "put_policy",
        status: "200",
        name: "ReadBack",
        to: "get_policy",
        parameters: &[("cluster", "$request.path.cluster")],
    },
];

fn link_operations(doc: &mut Value) {
    for operation in operations(doc) {
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for Link {
            from,
            status,
            name,
            to,
            parameters,
        } in LINKS.iter().filter(|link| link.from == id)
        {
            let parameters: Map<String, Value> = parameters
                .iter()
                .map(|(name, expression)| ((*name).to_owned(), json!(expression)))
                .collect();
            let response = operation
                .get_mut("responses")
                .and_then(|responses| responses.get_mut(*status))
                .unwrap_or_else(|| {
                    panic!("a link starts at {from} {status}, which is not documented")
                });
            response["links"][*name] = json!({"operationId": to, "parameters": parameters});
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checking request bodies against the contract.

/// Compiles the request body validators now (at start-up) rather than on the first request.
pub fn prepare() {
    body_validators();
}

/// One compiled validator per schema a client may send, by the Rust type's schema name.
fn body_validators() -> &'static std::collections::HashMap<String, jsonschema::Validator> {
    static VALIDATORS: std::sync::OnceLock<
        std::collections::HashMap<String, jsonschema::Validator>,
    > = std::sync::OnceLock::new();
    VALIDATORS.get_or_init(|| {
        let doc = super::openapi();
        let mut validators = std::collections::HashMap::new();
        for operation in doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|paths| paths.values())
            .flat_map(|item| item.as_object().into_iter().flat_map(|m| m.values()))
        {
            for name in refs_in(&operation["requestBody"]) {
                let root = json!({
                    "$ref": format!("{SCHEMA_REF}{name}"),
                    "components": {"schemas": doc["components"]["schemas"].clone()},
                });
                let validator = jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .build(&root)
                    .unwrap_or_else(|error| {
                        panic!("the schema of {name} does not compile: {error}")
                    });
                let type_name = name.strip_suffix(INPUT_SUFFIX).unwrap_or(&name).to_owned();
                validators.insert(type_name, validator);
            }
        }
        validators
    })
}

/// Every way `body` breaks the published schema of the type named `type_name`, each naming its
/// field as the rest of the API does (`members.silos[0]`); empty when it conforms or when the
/// type is not a request body.
pub fn check_body(type_name: &str, body: &Value) -> Vec<crate::validation::FieldError> {
    let Some(validator) = body_validators().get(type_name) else {
        return Vec::new();
    };
    if validator.is_valid(body) {
        return Vec::new();
    }
    let mut found = Vec::new();
    for error in validator.iter_errors(body) {
        field_errors(&error, &mut found);
    }
    // One message per field: an empty string breaks both `minLength` and `pattern`, say, and the
    // first says it best.
    let mut seen = BTreeSet::new();
    found.retain(|error| seen.insert(error.field.clone()));
    found
}

/// The field errors one schema violation stands for. A value that fits no branch of a union
/// (a nullable object, a filter of some kind) is reported by the branch it came closest to, so
/// the field named is the one inside that is wrong; a bad map key is named by the key.
fn field_errors(
    error: &jsonschema::ValidationError<'_>,
    out: &mut Vec<crate::validation::FieldError>,
) {
    use jsonschema::error::ValidationErrorKind as Kind;
    let field = dotted(&error.instance_path().to_string());
    match error.kind() {
        Kind::OneOfNotValid { context } | Kind::AnyOf { context } => {
            let here = error.instance_path().to_string();
            let closest = context
                .iter()
                .filter(|branch| {
                    !branch.iter().all(|e| {
                        matches!(e.kind(), Kind::Type { .. })
                            && e.instance_path().to_string() == here
                    })
                })
                .min_by_key(|branch| branch.len());
            match closest {
                Some(branch) => branch.iter().for_each(|e| field_errors(e, out)),
                None => out.push(field_error(field, error.to_string())),
            }
        }
        Kind::PropertyNames { error: inner } => {
            let key = inner.instance().as_str().unwrap_or_default().to_owned();
            let rule = match inner.kind() {
                Kind::Pattern { pattern } => pattern_rule(pattern),
                _ => inner.to_string(),
            };
            out.push(field_error(join(&field, &key), format!("key {rule}")));
        }
        Kind::AdditionalProperties { unexpected } => {
            for name in unexpected {
                out.push(field_error(
                    join(&field, name),
                    "unknown field: this object has no such field (see /openapi.json)".to_owned(),
                ));
            }
        }
        Kind::Pattern { pattern } => out.push(field_error(field, pattern_rule(pattern))),
        Kind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            out.push(field_error(join(&field, name), "is required".to_owned()));
        }
        // The one `not` the contract uses: fields that exclude each other.
        Kind::Not { schema } => {
            let mut names: Vec<String> = Vec::new();
            collect_required(schema, &mut names);
            names.sort();
            names.dedup();
            out.push(field_error(
                field,
                format!("give at most one of {}", names.join(", ")),
            ));
        }
        _ => out.push(field_error(field, error.to_string())),
    }
}

/// Every field name a schema's `required` lists mention, at any depth.
fn collect_required(schema: &Value, names: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(required)) = map.get("required") {
                names.extend(required.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            map.values()
                .for_each(|child| collect_required(child, names));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|child| collect_required(child, names)),
        _ => {}
    }
}

/// The rule a pattern stands for, in words.
fn pattern_rule(pattern: &str) -> String {
    let rule = if pattern == grain_id_pattern() {
        "must be `type/key`, e.g. `user/alice`: a grain type without white space, a '/', then a key without control characters"
    } else if pattern == grain_type_pattern() {
        "must not contain white space, control characters or '/'"
    } else if pattern == token_pattern("") {
        "must not contain white space or control characters (NUL, newline, tab, …)"
    } else if pattern == label_pattern() || pattern == optional_label(0)["pattern"] {
        "must not contain control characters (NUL, newline, tab, …)"
    } else if pattern.starts_with("^https?://") {
        "must be an http:// or https:// URL without white space"
    } else {
        return format!("must match the pattern {pattern}");
    };
    rule.to_owned()
}

fn field_error(field: String, message: String) -> crate::validation::FieldError {
    crate::validation::FieldError { field, message }
}

/// `parent.name`, or `name` for the whole body.
fn join(parent: &str, name: &str) -> String {
    if parent == "body" {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// `/members/silos/0` → `members.silos[0]`; the empty pointer (the whole body) → `body`.
fn dotted(pointer: &str) -> String {
    let mut field = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            field.push_str(&format!("[{segment}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(&segment);
        }
    }
    if field.is_empty() {
        "body".to_owned()
    } else {
        field
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::cluster::names::{check_grain_type, ClusterName, GrainId, SiloId};

    /// Whether `value` passes the published string rule `rules` (a JSON Schema fragment).
    fn passes(rules: &Value, value: &str) -> bool {
        compile(rules).is_valid(&json!(value))
    }

    fn compile(rules: &Value) -> jsonschema::Validator {
        let mut schema = rules.clone();
        schema["type"] = json!("string");
        jsonschema::validator_for(&schema).expect("the rule compiles")
    }

    /// The rules under test, compiled once: cluster, silo, grain, grain type, label, token.
    fn compiled() -> &'static [jsonschema::Validator; 6] {
        static RULES: std::sync::OnceLock<[jsonschema::Validator; 6]> = std::sync::OnceLock::new();
        RULES.get_or_init(|| {
            [
                dns_label(),
                silo_id(),
                grain_id(),
                grain_type(),
                label(128),
                token(128),
            ]
            .map(|rules| compile(&rules))
        })
    }

    /// Strings made of the characters the rules are about: letters, '/', '@', ':', spaces of both
    /// kinds, control characters, multi-byte letters; short and, now and then, over the limits.
    fn text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            4 => "[a-z0-9]{1,8}",
            1 => Just("/".to_owned()),
            1 => Just("@".to_owned()),
            1 => Just("-".to_owned()),
            1 => Just(" ".to_owned()),
            1 => Just("\u{3000}".to_owned()),
            1 => Just("\u{0}".to_owned()),
            1 => Just("\n".to_owned()),
            1 => Just("\u{85}".to_owned()),
            1 => Just("é".to_owned()),
            1 => Just("𝄞".to_owned()),
            1 => Just("A".to_owned()),
            1 => "[a-z]{60,130}",
        ];
        prop::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The contract's rule and the server's own check agree on every string: what the spec
        /// calls valid the server accepts, and what it calls invalid the server refuses.
        #[test]
        fn published_rules_are_the_servers_own(value in text()) {
            let [cluster, silo, grain, grain_type, label, token] = compiled();
            let json = json!(value);
            prop_assert_eq!(cluster.is_valid(&json), ClusterName::parse(&value).is_ok());
            prop_assert_eq!(silo.is_valid(&json), SiloId::parse("silo", &value).is_ok());
            prop_assert_eq!(grain.is_valid(&json), GrainId::parse("grain", &value).is_ok());
            prop_assert_eq!(
                grain_type.is_valid(&json),
                check_grain_type("grain_type", &value).is_ok()
            );
            prop_assert_eq!(
                label.is_valid(&json),
                crate::validation::label("role", &value, 128).is_ok()
            );
            prop_assert_eq!(
                token.is_valid(&json),
                crate::validation::token("key", &value, 128).is_ok()
            );
        }
    }

    /// Every type a handler reads with `ApiJson` has its published schema checked (a type whose
    /// schema name missed the map would be let through unchecked).
    #[test]
    fn every_request_body_type_has_a_validator() {
        use utoipa::ToSchema;
        let names = [
            super::super::heartbeats::HeartbeatRequest::name(),
            super::super::placements::PlacementRequest::name(),
            super::super::placements::PlacementBatchRequest::name(),
            super::super::placements::PlacementPreviewRequest::name(),
            crate::policy::Policy::name(),
            crate::connect::Pool::name(),
            super::super::rebalancer::SuspendRequest::name(),
            super::super::repartitioner::EdgeBatch::name(),
            super::super::keys::NewKeyRequest::name(),
        ];
        for name in names {
            assert!(body_validators().contains_key(name.as_ref()), "{name}");
        }
        let bodies = super::super::openapi()["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter(|operation| operation.get("requestBody").is_some())
            .count();
        assert_eq!(bodies, 9, "a new request body: add its type above");
    }

    #[test]
    fn long_ids_are_judged_by_characters_on_both_sides() {
        let longest = format!("user/{}", "é".repeat(MAX_GRAIN_ID_CHARS - 5));
        assert!(passes(&grain_id(), &longest));
        assert!(GrainId::parse("grain", &longest).is_ok());
        let too_long = format!("{longest}é");
        assert!(!passes(&grain_id(), &too_long));
        assert!(GrainId::parse("grain", &too_long).is_err());
    }

    /// Every string, number, list and map a client sends is bounded in the published schemas:
    /// a new field without a rule fails here, not in a fuzzer's hands.
    #[test]
    fn every_input_field_carries_the_servers_bounds() {
        let doc = super::super::openapi();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut roots = Vec::new();
        for path in doc["paths"].as_object().unwrap().values() {
            for operation in path.as_object().unwrap().values() {
                roots.extend(refs_in(&operation["requestBody"]));
            }
        }
        let mut unbounded = Vec::new();
        for name in reachable(schemas, roots) {
            let mut check = |owner: String, property: &Value| {
                let types: Vec<&str> = match &property["type"] {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                let bounded = |keyword: &str| property.get(keyword).is_some();
                for t in types {
                    let ok = match t {
                        "string" => bounded("enum") || (bounded("maxLength") && bounded("pattern")),
                        "integer" | "number" => {
                            (bounded("minimum") || bounded("exclusiveMinimum"))
                                && bounded("maximum")
                        }
                        "array" => {
                            bounded("maxItems") && property["items"].get("$ref").is_some()
                                || bounded("maxItems") && property["items"].get("pattern").is_some()
                                || bounded("maxItems")
                                    && property["items"].get("maxLength").is_some()
                        }
                        "object" => bounded("maxProperties") && bounded("propertyNames"),
                        _ => true,
                    };
                    if !ok {
                        unbounded.push(format!("{owner} ({t})"));
                    }
                }
            };
            let schema = &schemas[&name];
            let variants: Vec<&Value> = match schema["oneOf"].as_array() {
                Some(variants) => variants.iter().collect(),
                None => vec![schema],
            };
            for variant in variants {
                for (property, value) in variant["properties"].as_object().into_iter().flatten() {
                    check(format!("{name}.{property}"), value);
                }
            }
        }
        assert!(
            unbounded.is_empty(),
            "input fields without the server's bounds: {unbounded:?}"
        );
    }
}
