//! The responses the contract states for every operation: the common errors, load shedding,
//! credentials, headers and examples, and the links between operations.

use serde_json::{json, Map, Value};

use super::operations;
use crate::http::body_check::SCHEMA_REF;
use crate::http::{auth, error, examples, load_shedding};

// ---------------------------------------------------------------------------------------------
// Responses.

/// The answers every operation of a kind may give, whatever it does: said here once rather than
/// in every handler, each unless the operation says it in words of its own. Every `/v1` operation
/// reaches the store (503); one with a body may get one that is not JSON (400, 415) or too large
/// (413); one about a cluster may name one that cannot exist (422).
pub(super) fn document_common_errors(doc: &mut Value) {
    let problem = |description: &str| {
        json!({
            "description": description,
            "content": {error::PROBLEM_JSON: {"schema": {"$ref": format!("{SCHEMA_REF}Problem")}}},
        })
    };
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        if !path.starts_with("/v1/") {
            continue;
        }
        let operations = item
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut());
        for operation in operations {
            let has_body = operation.get("requestBody").is_some();
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let mut common = vec![("503", "The store is unavailable; retry")];
            if has_body {
                common.extend([
                    ("400", "The body is not valid JSON"),
                    ("413", "The body is too large"),
                    ("415", "The body is not JSON"),
                ]);
            }
            if path.starts_with("/v1/clusters/{cluster}") {
                common.push(("422", "Invalid cluster name"));
            }
            for (status, description) in common {
                responses
                    .entry(status)
                    .or_insert_with(|| problem(description));
            }
        }
    }
}

/// Any operation but health, readiness and metrics may be shed (503 `concurrency-limit-reached`,
/// see [`load_shedding`]): said here once for all of them rather than in every handler.
pub(super) fn document_load_shedding(doc: &mut Value) {
    const SHED: &str = "this replica is at ORACLE_MAX_CONCURRENT_REQUESTS requests in flight";
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        if load_shedding::EXEMPT_PATHS.contains(&path.as_str()) {
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
                    "content": {error::PROBLEM_JSON: {"schema": {"$ref": format!("{SCHEMA_REF}Problem")}}},
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

pub(super) fn document_responses(doc: &mut Value) {
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
                .and_then(|content| content.get_mut(error::PROBLEM_JSON));
            if let Some(problem) = problem {
                if let Some(example) = examples::example_problem(&operation_id, status) {
                    problem["example"] = example;
                }
            }
        }
    }
}

/// The `bearer` security scheme, and 401 and 403 answers on every operation that asks for it.
/// Each operation's requirement names the role it needs (`silo`, `operator`, `admin`; none: any
/// key of the cluster), which is what `super::auth` enforces.
pub(super) fn declare_credentials(doc: &mut Value) {
    doc["components"]["securitySchemes"][auth::SCHEME] = json!({
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
            "content": {error::PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
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

/// The document as an oracle in open mode (no admin token) serves it: that oracle asks no
/// credential, so every requirement becomes optional (an empty alternative, which OpenAPI reads as
/// "no authentication") and no operation answers 401 or 403. Clients and fuzzers generated from
/// the served document are then told what this oracle does, not what a configured one would.
pub(super) fn without_required_credentials(doc: &mut Value) {
    for operation in operations(doc) {
        let Some(Value::Array(requirements)) = operation.get_mut("security") else {
            continue;
        };
        if !requirements
            .iter()
            .any(|r| r.as_object().is_some_and(Map::is_empty))
        {
            requirements.push(json!({}));
        }
        if let Some(Value::Object(responses)) = operation.get_mut("responses") {
            responses.remove("401");
            responses.remove("403");
        }
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

pub(super) fn link_operations(doc: &mut Value) {
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
