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
use crate::connect::pool::bounds as pool;
use crate::placement::filters::bounds as filters;
use crate::placement::options::bounds as placement;
use crate::policy::bounds as policy;
use crate::rebalancer::options::bounds as rebalancer;
use crate::repartitioner::options::bounds as repartitioner;
use crate::validation::{label_pattern, optional_label_pattern, token_pattern, Bound};

use super::limits;

use super::body_check::{refs_in, INPUT_SUFFIX, SCHEMA_REF};

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
    json!({"maxLength": max, "pattern": optional_label_pattern()})
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

/// A number's [`Bound`]: `minimum` (or `exclusiveMinimum`) and `maximum`.
fn bound(bound: Bound) -> Value {
    let minimum = if bound.min_exclusive {
        "exclusiveMinimum"
    } else {
        "minimum"
    };
    json!({minimum: number(bound.min), "maximum": number(bound.max)})
}

/// How many items a list may hold: `maxItems`, and `minItems` unless it may be empty.
fn items(count: Bound) -> Value {
    let mut rules = json!({"maxItems": number(count.max)});
    if count.min > 0.0 {
        rules["minItems"] = number(count.min);
    }
    rules
}

/// A bound's number in JSON: whole numbers as integers.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value >= i64::MIN as f64 && value <= i64::MAX as f64 {
        json!(value as i64)
    } else if value.fract() == 0.0 && value >= 0.0 {
        json!(value as u64)
    } else {
        json!(value)
    }
}

/// A map's entries: how many (a [`Bound`]), what their keys are, what their values are.
fn metadata(entries: Bound, key_chars: usize, value: Value) -> Value {
    json!({
        "minProperties": number(entries.min),
        "maxProperties": number(entries.max),
        "propertyNames": token(key_chars),
        "additionalProperties": value,
    })
}

/// Merges the keywords of `more` into `rules`.
fn with(mut rules: Value, more: Value) -> Value {
    if let (Value::Object(rules), Value::Object(more)) = (&mut rules, more) {
        rules.extend(more);
    }
    rules
}

/// Builds the JSON Schema keywords of a rule.
type Rules = fn() -> Value;

/// The rules of every input field, by schema and property; a schema name ending in `[]` means
/// every variant of that union. A test checks that no input string, number, list or map is left
/// without one.
const FIELD_RULES: &[(&str, &str, Rules)] = &[
    ("HeartbeatRequest", "silo", silo_id),
    ("HeartbeatRequest", "address", silo_id),
    ("HeartbeatRequest", "role", || label(limits::MAX_ROLE_CHARS)),
    ("HeartbeatRequest", "metadata", || {
        metadata(
            limits::HEARTBEAT_METADATA,
            limits::MAX_METADATA_KEY_CHARS,
            optional_label(limits::MAX_METADATA_VALUE_CHARS),
        )
    }),
    ("HeartbeatRequest", "grain_types", || {
        with(items(limits::GRAIN_TYPES), json!({"items": grain_type()}))
    }),
    ("HeartbeatRequest", "cpu_usage", || bound(limits::CPU_USAGE)),
    ("HeartbeatRequest", "memory_usage_bytes", count),
    ("HeartbeatRequest", "max_available_memory_bytes", count),
    ("HeartbeatRequest", "activation_count", count),
    ("HeartbeatRequest", "recent_activation_count", count),
    ("HeartbeatRequest", "connection_count", count),
    ("HeartbeatRequest", "network_bytes_per_second", count),
    ("PlacementRequest", "grain", grain_id),
    ("PlacementRequest", "requesting_silo", silo_id),
    ("PlacementRequest", "hint", silo_id),
    ("PlacementPreviewRequest", "grain", grain_id),
    ("PlacementPreviewRequest", "requesting_silo", silo_id),
    ("PlacementPreviewRequest", "hint", silo_id),
    ("PlacementBatchRequest", "placements", || {
        items(limits::BATCH)
    }),
    ("Policy", "silo_ttl_ms", || bound(policy::SILO_TTL_MS)),
    ("Policy", "migration_ttl_ms", || {
        bound(policy::MIGRATION_TTL_MS)
    }),
    ("RebalancerOptions", "due_time_ms", || {
        bound(rebalancer::DUE_TIME_MS)
    }),
    ("RebalancerOptions", "session_cycle_period_ms", || {
        bound(rebalancer::SESSION_CYCLE_PERIOD_MS)
    }),
    ("RebalancerOptions", "max_stagnant_cycles", || {
        unsigned_32(rebalancer::MAX_STAGNANT_CYCLES)
    }),
    ("RebalancerOptions", "entropy_quantum", || {
        bound(rebalancer::ENTROPY_QUANTUM)
    }),
    ("RebalancerOptions", "allowed_entropy_deviation", || {
        bound(rebalancer::ALLOWED_ENTROPY_DEVIATION)
    }),
    (
        "RebalancerOptions",
        "scaled_entropy_deviation_activation_threshold",
        || bound(rebalancer::SCALED_ENTROPY_DEVIATION_ACTIVATION_THRESHOLD),
    ),
    ("RebalancerOptions", "cycle_number_weight", || {
        bound(rebalancer::CYCLE_NUMBER_WEIGHT)
    }),
    ("RebalancerOptions", "silo_number_weight", || {
        bound(rebalancer::SILO_NUMBER_WEIGHT)
    }),
    (
        "RebalancerOptions",
        "activation_migration_count_limit",
        || bound(rebalancer::ACTIVATION_MIGRATION_COUNT_LIMIT),
    ),
    ("SuspendRequest", "duration_ms", || {
        bound(limits::SUSPENSION_MS)
    }),
    ("EdgeBatch", "edges", || items(limits::EDGES)),
    ("Edge", "from", grain_id),
    ("Edge", "to", grain_id),
    ("Edge", "count", || bound(limits::EDGE_COUNT)),
    ("RepartitionerOptions", "max_edge_count", || {
        bound(repartitioner::MAX_EDGE_COUNT)
    }),
    ("RepartitionerOptions", "max_unprocessed_edges", || {
        bound(repartitioner::MAX_UNPROCESSED_EDGES)
    }),
    ("RepartitionerOptions", "min_round_period_ms", || {
        bound(repartitioner::MIN_ROUND_PERIOD_MS)
    }),
    ("RepartitionerOptions", "max_round_period_ms", || {
        bound(repartitioner::MAX_ROUND_PERIOD_MS)
    }),
    ("RepartitionerOptions", "recovery_period_ms", || {
        bound(repartitioner::RECOVERY_PERIOD_MS)
    }),
    (
        "RepartitionerOptions",
        "probabilistic_filtering_max_allowed_error_rate",
        || bound(repartitioner::FILTER_ERROR_RATE),
    ),
    ("RepartitionerOptions", "max_imbalance_percent", || {
        bound(repartitioner::MAX_IMBALANCE_PERCENT)
    }),
    (
        "Policy",
        "grain_types",
        || json!({"maxProperties": number(policy::GRAIN_TYPES.max), "propertyNames": grain_type()}),
    ),
    (
        "GrainTypePolicy",
        "filters",
        || json!({"maxItems": number(filters::FILTERS.max)}),
    ),
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
        bound(placement::CHOOSE_OUT_OF)
    }),
    ("StatelessWorkerOptions", "max_local", || {
        unsigned_32(placement::MAX_LOCAL)
    }),
    ("ConsistentHashOptions", "load_factor_percent", || {
        bound(placement::LOAD_FACTOR_PERCENT)
    }),
    ("WebhookOptions", "url", || {
        json!({
            "maxLength": crate::placement::options::MAX_WEBHOOK_URL_CHARS,
            "pattern": format!("^https?://{}$", crate::validation::token_class("", "*")),
        })
    }),
    ("WebhookOptions", "timeout_ms", || {
        bound(placement::WEBHOOK_TIMEOUT_MS)
    }),
    ("Filter[]", "keys", || {
        with(
            items(filters::KEYS),
            json!({"items": token(filters::MAX_KEY_CHARS)}),
        )
    }),
    ("Filter[]", "order", || bound(filters::ORDER)),
    ("Filter[]", "min_candidates", || {
        unsigned_32(filters::MIN_CANDIDATES)
    }),
    ("Pool", "ttl_seconds", || bound(pool::TTL_SECONDS)),
    ("Members", "silos", || {
        with(items(pool::SILOS), json!({"items": silo_id()}))
    }),
    ("Members", "role", || label(pool::MAX_ROLE_CHARS)),
    ("Members", "metadata", || {
        metadata(
            pool::METADATA,
            pool::MAX_METADATA_KEY_CHARS,
            label(pool::MAX_METADATA_VALUE_CHARS),
        )
    }),
    ("NewKeyRequest", "scopes", || items(limits::KEY_SCOPES)),
    ("NewKeyRequest", "label", || {
        optional_label(limits::MAX_KEY_LABEL_CHARS)
    }),
];

/// A `u32`'s bound: beyond `int32`, so its format says `int64`.
fn unsigned_32(u32_bound: Bound) -> Value {
    with(bound(u32_bound), json!({"format": "int64"}))
}

fn count() -> Value {
    bound(limits::COUNT)
}

fn percent() -> Value {
    bound(placement::PERCENT)
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
        "cursor" if path.ends_with("/migrations") => bound(limits::MIGRATION_CURSOR),
        "id" => bound(limits::MIGRATION_ID),
        "cursor" => label(crate::cluster::names::MAX_STORED_GRAIN_ID_CHARS),
        "limit" => bound(crate::validation::PAGE_LIMIT),
        "epoch" => bound(limits::EPOCH),
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
        super::super::body_check::install(super::super::openapi());
        for name in names {
            assert!(super::super::body_check::knows(name.as_ref()), "{name}");
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
