//! The examples the published contract shows for error responses: real errors, built the way the
//! handlers build them, so their wording cannot drift from what the server says.
//!
//! Each status has one example every operation shares ([`by_status`]); an operation that most
//! likely meets another error of that status names it in [`BY_OPERATION`]. A test holds every
//! name there to an operation of the spec that answers that status, so a renamed handler cannot
//! quietly lose its example.

use axum::http::StatusCode;

use super::error::ApiError;
use crate::cluster::HeartbeatRejection;
use crate::oracle::OracleError;
use crate::placement::PlacementError;
use crate::rate_limit::{Kind, RateLimited, Rates};
use crate::store::{LimitReached, StoreError};
use crate::validation::Invalid;

/// The silo id the examples name.
const SILO: &str = "10.0.0.5:11111@139000";

/// An example error.
type Example = fn() -> ApiError;

/// Operations whose likeliest error of a status is not that status's shared one.
pub const BY_OPERATION: &[(&[&str], &str, Example)] = &[
    (&["put_policy"], "400", || {
        ApiError::bad_request(
            "If-Match must be an ETag this API issued (like \"3\") or *, got \"three\"",
        )
    }),
    (&["get_activation", "delete_activation"], "404", || {
        OracleError::ActivationNotFound("user/alice".into()).into()
    }),
    (&["get_pool", "post_connection"], "404", || {
        OracleError::PoolNotFound {
            cluster: "demo".into(),
            pool: "frontend".into(),
        }
        .into()
    }),
    (&["complete_migration", "fail_migration"], "404", || {
        OracleError::MigrationNotFound(17).into()
    }),
    (&["get_silo", "delete_silo", "drain_silo"], "404", || {
        OracleError::SiloNotFound {
            cluster: "demo".into(),
            silo: SILO.into(),
        }
        .into()
    }),
    (&["issue_key", "list_keys", "revoke_key"], "403", || {
        ApiError::forbidden("this needs the admin token; cluster keys cannot do it")
    }),
    (&["post_heartbeat"], "409", || {
        OracleError::HeartbeatRejected(HeartbeatRejection::DeclaredDead {
            silo: SILO.into(),
            last_heartbeat_ms: 1_764_547_200_000,
            silo_ttl_ms: 10_000,
        })
        .into()
    }),
    (&["delete_activation"], "409", || {
        OracleError::ActivationElsewhere {
            grain: "user/alice".into(),
            silo: SILO.into(),
            epoch: 8,
        }
        .into()
    }),
    (
        &["post_cycle", "post_session", "post_suspend", "post_resume"],
        "409",
        || {
            OracleError::LeaseHeldElsewhere {
                holder: "oracle-7c9f-4211".into(),
                expires_at_ms: 1_764_547_210_000,
            }
            .into()
        },
    ),
    (&["drain_silo"], "409", || {
        OracleError::SiloDead(SILO.into()).into()
    }),
    (&["complete_migration"], "409", || {
        OracleError::MigrationRefused {
            id: 17,
            why: "grain `user/alice` is now activation 9 on `10.0.0.7:11111@1`, not activation 8 \
                  on `10.0.0.5:11111@1`"
                .into(),
        }
        .into()
    }),
    (&["fail_migration"], "409", || {
        OracleError::MigrationEnded {
            id: 17,
            how: "completed already: grain `user/alice` is activation 9 on `10.0.0.6:11111@1`"
                .into(),
        }
        .into()
    }),
    (&["post_placement"], "409", || {
        PlacementError::NoCompatibleSilo {
            grain_type: "user".into(),
            active: vec![SILO.into()],
        }
        .into()
    }),
    (&["post_heartbeat"], "422", || {
        Invalid::one("cpu_usage", "140 is greater than the maximum of 100").into()
    }),
    (&["post_placement", "post_placement_batch"], "422", || {
        Invalid::one(
            "grain",
            "must be `type/key`, e.g. `user/alice`: a grain type without white space, a '/', \
             then a key without control characters",
        )
        .into()
    }),
    (&["put_policy"], "422", || {
        Invalid::one(
            "options.activation_count.choose_out_of",
            "0 is less than the minimum of 1",
        )
        .into()
    }),
    (&["put_pool"], "422", || {
        Invalid::one("ttl_seconds", "86400 is greater than the maximum of 3600").into()
    }),
    (
        &["list_silos", "list_activations", "list_migrations"],
        "422",
        || Invalid::one("limit", "must be from 1 to 1000, got 0").into(),
    ),
    (&["delete_activation"], "422", || {
        Invalid::one("epoch", "missing field `epoch`").into()
    }),
    (&["post_suspend"], "422", || {
        Invalid::one("duration_ms", "0 is less than the minimum of 1").into()
    }),
    (&["post_heartbeat"], "429", || {
        StoreError::Limit(LimitReached::Silos {
            cluster: "demo".into(),
            max: 5_000,
            retry_after_ms: 10_000,
        })
        .into()
    }),
    (&["post_edges"], "429", || {
        rate_limited(Kind::Edges, Rates::DEFAULT.edges)
    }),
    (&["post_placement", "post_placement_batch"], "503", || {
        PlacementError::NoActiveSilo { known: 0 }.into()
    }),
    (&["post_connection"], "503", || {
        OracleError::NoAvailableNode {
            pool: "frontend".into(),
        }
        .into()
    }),
];

/// The example of `status` for operation `operation_id`.
pub fn example_problem(operation_id: &str, status: &str) -> Option<serde_json::Value> {
    let error = BY_OPERATION
        .iter()
        .find(|(operations, s, _)| *s == status && operations.contains(&operation_id))
        .map(|(_, _, example)| example())
        .or_else(|| by_status(status))?;
    serde_json::to_value(error.problem()).ok()
}

/// The example every operation shares for `status`.
fn by_status(status: &str) -> Option<ApiError> {
    Some(match status {
        "400" => ApiError::bad_request(
            "the body is not valid JSON: EOF while parsing an object at line 1 column 17",
        ),
        "401" => ApiError::unauthenticated(
            "send `Authorization: Bearer <key>` with a cluster key or the admin token",
        ),
        "403" => ApiError::forbidden("this key belongs to another cluster, not `demo`"),
        "404" => OracleError::ClusterNotFound("demo".into()).into(),
        "405" => ApiError::from_status(StatusCode::METHOD_NOT_ALLOWED),
        "409" => StoreError::Limit(LimitReached::Clusters { max: 10_000 }).into(),
        "412" => OracleError::PolicyVersionMismatch { current: 4 }.into(),
        "413" => ApiError::from_status(StatusCode::PAYLOAD_TOO_LARGE),
        "415" => ApiError::unsupported_media_type(),
        "422" => Invalid::one(
            "cluster",
            "must match [a-z0-9][a-z0-9-]{0,62}: lower-case letters, digits and '-', starting \
             with a letter or digit, at most 63 characters",
        )
        .into(),
        "428" => ApiError::if_match_required(),
        "429" => rate_limited(Kind::Placements, Rates::DEFAULT.placements),
        "503" => StoreError::Unreachable(String::new()).into(),
        _ => return None,
    })
}

fn rate_limited(kind: Kind, per_second: u32) -> ApiError {
    RateLimited {
        kind,
        cluster: crate::cluster::ClusterName::parse("demo").expect("a cluster name"),
        per_second,
        retry_after_ms: 10,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler renamed (or a response dropped) must not quietly lose its example.
    #[test]
    fn every_example_names_an_operation_that_answers_its_status() {
        let doc = crate::http::openapi();
        let answers = |operation_id: &str, status: &str| {
            doc["paths"]
                .as_object()
                .into_iter()
                .flat_map(|paths| paths.values())
                .flat_map(|item| item.as_object().into_iter().flat_map(|m| m.values()))
                .any(|op| {
                    op["operationId"] == operation_id && op["responses"].get(status).is_some()
                })
        };
        for (operations, status, _) in BY_OPERATION {
            for operation in *operations {
                assert!(
                    answers(operation, status),
                    "{operation} has an example for {status} but the spec has no such answer"
                );
            }
        }
    }
}
