//! Request bodies checked against the published contract: the schemas clients generate from are
//! the server's own check. Installed once from the finished document ([`install`], called when the
//! app is built), so this check depends on nothing that builds the document.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::cluster::names::{grain_id_pattern, grain_type_pattern};
use crate::validation::{label_pattern, optional_label_pattern, token_pattern, FieldError};

/// Where the document keeps its schemas.
pub const SCHEMA_REF: &str = "#/components/schemas/";
/// Suffix of the schema a client sends when it differs from the one the server writes.
pub const INPUT_SUFFIX: &str = "Input";

/// One compiled validator per schema a client may send, by the Rust type's schema name.
static VALIDATORS: OnceLock<HashMap<String, jsonschema::Validator>> = OnceLock::new();

/// Compiles a validator for every request body of `doc` (the published document). Once per
/// process: later calls keep the first.
pub fn install(doc: &Value) {
    VALIDATORS.get_or_init(|| {
        let mut validators = HashMap::new();
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
    });
}

fn validators() -> &'static HashMap<String, jsonschema::Validator> {
    VALIDATORS
        .get()
        .expect("the body check is installed when the app is built (http::app)")
}

/// Whether `type_name` is a request body the check knows.
#[cfg(test)]
pub fn knows(type_name: &str) -> bool {
    validators().contains_key(type_name)
}

/// Every way `body` breaks the published schema of the type named `type_name`, each naming its
/// field as the rest of the API does (`members.silos[0]`); empty when it conforms or when the
/// type is not a request body.
pub fn check(type_name: &str, body: &Value) -> Vec<FieldError> {
    let Some(validator) = validators().get(type_name) else {
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
fn field_errors(error: &jsonschema::ValidationError<'_>, out: &mut Vec<FieldError>) {
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
    } else if pattern == label_pattern() || pattern == optional_label_pattern() {
        "must not contain control characters (NUL, newline, tab, …)"
    } else if pattern.starts_with("^https?://") {
        "must be an http:// or https:// URL without white space"
    } else {
        return format!("must match the pattern {pattern}");
    };
    rule.to_owned()
}

fn field_error(field: String, message: String) -> FieldError {
    FieldError { field, message }
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

/// The schema names `value` refers to, at any depth.
pub fn refs_in(value: &Value) -> Vec<String> {
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
