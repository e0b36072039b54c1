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
//!   and pattern the server enforces ([`rules`]); request bodies are
//!   checked against these very schemas ([`super::extract::ApiJson`]), so a body the spec calls
//!   valid is one the server's schema check accepts and vice versa.
//! - **Responses say what comes back.** Each error response shows an example of that error,
//!   every response documents `x-request-id`, 429 and 503 document `Retry-After`; every operation
//!   that may be shed says so in its 503.

mod responses;
mod rules;

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::body_check::{refs_in, INPUT_SUFFIX, SCHEMA_REF};

/// Finishes the document utoipa derived (see the module docs).
pub fn publish(mut doc: Value) -> Value {
    visit_objects(&mut doc, &mut unwrap_single_one_of);
    split_inputs_from_outputs(&mut doc);
    rules::apply_field_rules(&mut doc);
    rules::apply_parameter_rules(&mut doc);
    title_union_variants(&mut doc);
    responses::declare_credentials(&mut doc);
    responses::document_common_errors(&mut doc);
    responses::document_load_shedding(&mut doc);
    responses::document_responses(&mut doc);
    responses::link_operations(&mut doc);
    doc["info"]["license"] =
        json!({"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"});
    doc["servers"] = json!([{"url": "/", "description": "The oracle serving this document"}]);
    doc
}

/// The published document as an oracle in open mode serves it (see
/// [`responses::without_required_credentials`]).
pub fn open_mode(published: &Value) -> Value {
    let mut doc = published.clone();
    responses::without_required_credentials(&mut doc);
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
