//! The server's rules, stated in the schemas: every input string, number, list and map carries
//! the bounds and pattern the server checks, read from the same declarations.

use serde_json::{json, Value};

use crate::cluster::names::{
    grain_id_pattern, grain_type_pattern, DNS_LABEL_PATTERN, MAX_GRAIN_ID_CHARS,
    MAX_GRAIN_TYPE_CHARS, MAX_SILO_ID_CHARS,
};
use crate::connect::pool::bounds as pool;
use crate::http::body_check::INPUT_SUFFIX;
use crate::http::limits;
use crate::placement::filters::bounds as filters;
use crate::placement::options::bounds as placement;
use crate::policy::bounds as policy;
use crate::rebalancer::options::bounds as rebalancer;
use crate::repartitioner::options::bounds as repartitioner;
use crate::validation::{label_pattern, optional_label_pattern, token_pattern, Bound};
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

pub(super) fn apply_field_rules(doc: &mut Value) {
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

pub(super) fn apply_parameter_rules(doc: &mut Value) {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::reachable;
    use super::*;
    use crate::cluster::names::{check_grain_type, ClusterName, GrainId, SiloId};
    use crate::http::body_check::refs_in;

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
            crate::http::heartbeats::HeartbeatRequest::name(),
            crate::http::placements::PlacementRequest::name(),
            crate::http::placements::PlacementBatchRequest::name(),
            crate::http::placements::PlacementPreviewRequest::name(),
            crate::policy::Policy::name(),
            crate::connect::Pool::name(),
            crate::http::rebalancer::SuspendRequest::name(),
            crate::http::repartitioner::EdgeBatch::name(),
            crate::http::keys::NewKeyRequest::name(),
        ];
        crate::http::body_check::install(crate::http::openapi());
        for name in names {
            assert!(crate::http::body_check::knows(name.as_ref()), "{name}");
        }
        let bodies = crate::http::openapi()["paths"]
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
        let doc = crate::http::openapi();
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
