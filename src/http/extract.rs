//! Extractors that turn every way a request can be malformed into a problem response.
//!
//! axum's own extractors answer with plain-text bodies; these wrap them so that a wrong content
//! type (415), an oversized body (413), broken JSON (400) and well-formed JSON with wrong or unknown
//! fields (422, naming the field) all come back as problem+json.
//!
//! A JSON body is checked against the schema the published contract gives it before it is
//! deserialised: the contract's bounds and patterns are the server's own, serde's leniencies (a
//! struct read from an array, say) never let a body the contract calls invalid through, and a
//! body the contract calls valid is never refused by the check.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

use super::error::ApiError;
use super::limits;
use crate::cluster::{GrainId, PoolName, SiloId};
use crate::validation::Invalid;

/// A JSON body, deserialised with field paths in its errors.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned + ToSchema,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !is_json(request.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::unsupported_media_type());
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(body_rejection)?;
        parse_checked_json::<T>(&bytes).map(ApiJson)
    }
}

/// Parses a body, checks it against `T`'s published schema, then deserialises it.
pub fn parse_checked_json<T: DeserializeOwned + ToSchema>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut value = parse_value(bytes)?;
    integral_floats_as_integers(&mut value);
    let violations = super::body_check::check(&T::name(), &value);
    if !violations.is_empty() {
        return Err(Invalid(violations).into());
    }
    from_value(value)
}

/// JSON Schema calls `97.0` an integer, serde does not; a number with no fraction becomes an
/// integer so that a body the schema accepts deserialises (a float field reads integers too).
fn integral_floats_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(number) => {
            if let Some(float) = number.as_f64().filter(|_| number.is_f64()) {
                if float.fract() == 0.0 && (i64::MIN as f64..i64::MAX as f64).contains(&float) {
                    *number = serde_json::Number::from(float as i64);
                } else if float.fract() == 0.0 && (0.0..u64::MAX as f64).contains(&float) {
                    *number = serde_json::Number::from(float as u64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

/// Deserialises a checked JSON value, naming the field of any error.
fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let message = strip_position(&error.into_inner().to_string());
        ApiError::from(Invalid::one(field_of(&path), message))
    })
}

fn is_json(content_type: Option<&header::HeaderValue>) -> bool {
    let Some(Ok(value)) = content_type.map(|v| v.to_str()) else {
        return false;
    };
    let mime = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

fn body_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "The request body is too large",
            "the body exceeds ORACLE_BODY_LIMIT_BYTES; split a batch into smaller ones",
        )
    } else {
        ApiError::bad_request(format!("the body could not be read: {rejection}"))
    }
}

/// Parses JSON; what is not JSON text is a 400.
fn parse_value(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|error| ApiError::bad_request(format!("the body is not valid JSON: {error}")))
}

/// The field a serde error is about. serde_path_to_error's path already ends with an unknown
/// field's own name; an error about the whole body has the path ".".
fn field_of(path: &str) -> String {
    if path == "." {
        "body".to_owned()
    } else {
        path.to_owned()
    }
}

/// serde_json appends " at line 1 column 42"; the field name already says where.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// The raw value of the path's `{name}` segment (percent-decoded).
async fn segment<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|rejection| {
            ApiError::bad_request(format!("bad path: {}", rejection.body_text()))
        })?;
    params
        .iter()
        .find_map(|(key, value)| (key == name).then(|| value.to_owned()))
        .ok_or_else(|| {
            tracing::error!(
                segment = name,
                "a route without this segment takes its extractor"
            );
            ApiError::internal()
        })
}

/// Declares an extractor of one path segment, parsed by its domain type: a value that does not
/// parse is a 422 naming the segment.
macro_rules! path_segment {
    ($(#[$doc:meta])* $extractor:ident($type:ty) = $name:literal, $parse:expr) => {
        $(#[$doc])*
        pub struct $extractor(pub $type);

        impl<S: Send + Sync> FromRequestParts<S> for $extractor {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
                let raw = segment(parts, state, $name).await?;
                let parse: fn(&str) -> Result<$type, ApiError> = $parse;
                parse(&raw).map($extractor)
            }
        }
    };
}

path_segment!(
    /// The `{silo}` of the path.
    SiloParam(SiloId) = "silo",
    |raw| Ok(SiloId::parse("silo", raw)?)
);
path_segment!(
    /// The `{grain}` of the path (it may hold '/').
    GrainParam(GrainId) = "grain",
    |raw| Ok(GrainId::parse("grain", raw)?)
);
path_segment!(
    /// The `{pool}` of the path.
    PoolParam(PoolName) = "pool",
    |raw| Ok(PoolName::parse(raw)?)
);
path_segment!(
    /// The `{id}` of a migration's path.
    MigrationParam(i64) = "id",
    |raw| {
        raw.parse::<i64>()
            .ok()
            .filter(|&id| limits::MIGRATION_ID.allows(id as f64))
            .ok_or_else(|| {
                Invalid::one(
                    "id",
                    format!(
                        "must be a migration id: a whole number {}",
                        limits::MIGRATION_ID.describe()
                    ),
                )
                .into()
            })
    }
);
path_segment!(
    /// The `{id}` of a key's path, as given (an id no key could have names no key).
    KeyParam(String) = "id",
    |raw| Ok(raw.to_owned())
);

/// Query parameters; a wrong one is a 422 problem naming it.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(ApiQuery)
            .map_err(|error| {
                let message = error.inner().to_string();
                let field = match error.path().to_string().as_str() {
                    "." => message.split('`').nth(1).unwrap_or("query").to_owned(),
                    path => path.to_owned(),
                };
                ApiError::from(Invalid::one(field, message))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::connect::Pool;
    use crate::http::heartbeats::HeartbeatRequest;

    /// [`parse_checked_json`], with the check installed as the app installs it.
    fn checked<T: DeserializeOwned + ToSchema>(body: &[u8]) -> Result<T, ApiError> {
        super::super::body_check::install(crate::http::openapi());
        parse_checked_json(body)
    }

    fn field(body: &str) -> (StatusCode, Vec<String>) {
        let error = checked::<HeartbeatRequest>(body.as_bytes()).unwrap_err();
        let problem = error.problem();
        (
            error.status(),
            problem.errors.into_iter().map(|e| e.field).collect(),
        )
    }

    #[test]
    fn content_errors_name_the_field_and_syntax_errors_are_400() {
        let unprocessable = |fields: &[&str]| {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                fields.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            field(r#"{"silo": "a@1", "cpu_usage": "high"}"#),
            unprocessable(&["cpu_usage"])
        );
        assert_eq!(
            field(r#"{"silo": "a@1", "cpu": 1}"#),
            unprocessable(&["cpu"])
        );
        assert_eq!(
            field(r#"{"silo": "a@1", "metadata": {"zone": 1}}"#),
            unprocessable(&["metadata.zone"])
        );
        assert_eq!(field(r#"{"cpu_usage": 1}"#), unprocessable(&["silo"]));
        assert_eq!(field(r#"{"silo": "a@1""#).0, StatusCode::BAD_REQUEST);
        assert_eq!(field("[]"), unprocessable(&["body"]));
        assert_eq!(field(r#"{"silo": "a@1"} junk"#).0, StatusCode::BAD_REQUEST);
        assert_eq!(
            field(r#"{"silo": "a@1"}{"silo": "b@1"}"#).0,
            StatusCode::BAD_REQUEST
        );
    }

    /// serde reads a struct from an array too; the schema check does not let one through.
    #[test]
    fn an_array_where_an_object_belongs_is_refused_not_read_as_a_struct() {
        let error = checked::<Pool>(br#"{"members": [null, null]}"#).unwrap_err();
        assert_eq!(error.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(error.problem().errors[0].field, "members");
    }

    #[test]
    fn json_content_types_are_recognised() {
        let ok = |v: &'static str| is_json(Some(&header::HeaderValue::from_static(v)));
        assert!(ok("application/json"));
        assert!(ok("application/json; charset=utf-8"));
        assert!(ok("application/merge-patch+json"));
        assert!(!ok("text/plain"));
        assert!(!is_json(None));
    }
}
