//! The HTTP side: one cluster's routes on any of the oracle's replicas, with a cluster key.
//!
//! Replicas are interchangeable, so one that does not answer, or answers 503 (it may be the one
//! that cannot reach the store), is left for the next at once; the one that answered is asked
//! first next time. Problems (RFC 9457) become [`OracleError`]s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::backoff::parse_retry_after;
use crate::error::OracleError;

/// How a client reaches the oracle.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// A cluster key (`silo` scope for silos, `operator` too for drains); `None` in open mode.
    pub key: Option<String>,
    /// Longest wait for one replica's answer. A call that times out is sent to the next replica,
    /// so keep it above the oracle's own request timeout (5 s) for calls that must not be sent
    /// twice.
    pub timeout: Duration,
    /// The replica asked first (an index into the URLs), so that silos spread over replicas.
    pub first_replica: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            key: None,
            timeout: Duration::from_secs(2),
            first_replica: 0,
        }
    }
}

/// One cluster on the oracle; cheap to clone (clones share connections and the preferred
/// replica).
#[derive(Clone)]
pub struct OracleClient {
    inner: Arc<Inner>,
}

struct Inner {
    urls: Vec<String>,
    cluster: String,
    http: reqwest::Client,
    /// Longest wait for one replica's answer (see [`ClientOptions::timeout`]).
    timeout: Duration,
    preferred: AtomicUsize,
}

impl OracleClient {
    /// A client of `cluster` on the replicas at `urls` (`http://host:port`, no trailing path).
    pub fn new(
        urls: &[impl AsRef<str>],
        cluster: &str,
        options: ClientOptions,
    ) -> Result<Self, OracleError> {
        if urls.is_empty() {
            return Err(OracleError::unexpected("at least one oracle URL"));
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = &options.key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| OracleError::unexpected("the key is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .timeout(options.timeout)
            .default_headers(headers)
            .build()
            .map_err(|e| OracleError::unexpected(e.to_string()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                urls: urls
                    .iter()
                    .map(|u| u.as_ref().trim_end_matches('/').to_owned())
                    .collect(),
                cluster: cluster.to_owned(),
                http,
                timeout: options.timeout,
                preferred: AtomicUsize::new(options.first_replica % urls.len()),
            }),
        })
    }

    pub fn cluster(&self) -> &str {
        &self.inner.cluster
    }

    /// `method` on `/v1/clusters/{cluster}{rest}` (`rest` already encoded, see [`segment`]),
    /// read as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        rest: &str,
        body: Option<&Value>,
    ) -> Result<T, OracleError> {
        self.call_within(method, rest, body, None).await
    }

    /// As [`Self::call`], waiting for each replica at most `attempt` (when shorter than the
    /// client's timeout) before the next is tried: for calls that may safely reach two replicas.
    pub async fn call_within<T: DeserializeOwned>(
        &self,
        method: Method,
        rest: &str,
        body: Option<&Value>,
        attempt: Option<Duration>,
    ) -> Result<T, OracleError> {
        let value = self.send(method, rest, body, attempt).await?;
        serde_json::from_value(value).map_err(|e| OracleError::unexpected(format!("{rest}: {e}")))
    }

    /// As [`Self::call`], the body as JSON (`Null` for an empty one).
    pub async fn call_value(
        &self,
        method: Method,
        rest: &str,
        body: Option<&Value>,
    ) -> Result<Value, OracleError> {
        self.send(method, rest, body, None).await
    }

    async fn send(
        &self,
        method: Method,
        rest: &str,
        body: Option<&Value>,
        attempt: Option<Duration>,
    ) -> Result<Value, OracleError> {
        let urls = &self.inner.urls;
        let start = self.inner.preferred.load(Ordering::Relaxed);
        let mut failure = OracleError::unreachable("not sent");
        for turn in 0..urls.len() {
            let index = (start + turn) % urls.len();
            let url = format!(
                "{}/v1/clusters/{}{rest}",
                urls[index],
                segment(&self.inner.cluster)
            );
            let mut request = self.inner.http.request(method.clone(), url);
            if let Some(attempt) = attempt.filter(|&a| a < self.inner.timeout) {
                request = request.timeout(attempt);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(error) => {
                    tracing::debug!(replica = %urls[index], %error, "oracle unreachable");
                    failure = OracleError::unreachable(error.to_string());
                    continue;
                }
            };
            let status = response.status();
            let retry_after = parse_retry_after(
                response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()),
            );
            let bytes = match response.bytes().await {
                Ok(bytes) => bytes,
                Err(error) => {
                    failure = OracleError::unreachable(error.to_string());
                    continue;
                }
            };
            if is_replica_failure(status) && turn + 1 < urls.len() {
                failure = problem(status, &bytes, retry_after);
                continue;
            }
            self.inner.preferred.store(index, Ordering::Relaxed);
            if status.is_client_error() || status.is_server_error() {
                return Err(problem(status, &bytes, retry_after));
            }
            if bytes.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&bytes)
                .map_err(|e| OracleError::unexpected(format!("{rest}: {e}")));
        }
        Err(failure)
    }
}

/// A replica that cannot serve now (it, or a proxy in front of it): the next one may.
fn is_replica_failure(status: StatusCode) -> bool {
    matches!(status.as_u16(), 502..=504)
}

fn problem(
    status: StatusCode,
    body: &[u8],
    retry_after: Option<std::time::Duration>,
) -> OracleError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let kind = parsed["type"]
        .as_str()
        .and_then(|t| t.rsplit(':').next())
        .filter(|t| !t.is_empty())
        .unwrap_or("unknown");
    let detail = parsed["detail"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    OracleError {
        status: status.as_u16(),
        problem: kind.to_owned(),
        detail,
        retry_after,
    }
}

/// `text` as one URL path segment or query value: everything but RFC 3986's unreserved
/// characters percent-encoded (grain ids hold `/`, silo ids `:` and `@`).
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_as_one_segment() {
        assert_eq!(segment("user/42"), "user%2F42");
        assert_eq!(segment("10.0.0.1:11111@3"), "10.0.0.1%3A11111%403");
        assert_eq!(segment("é"), "%C3%A9");
    }

    #[test]
    fn a_problem_is_read_by_its_type() {
        let body = br#"{"type":"urn:placement-oracle:problem:silo-declared-dead","title":"t","status":409,"detail":"the silo was declared dead"}"#;
        let error = problem(StatusCode::CONFLICT, body, None);
        assert!(error.is_declared_dead());
        assert!(!error.is_retryable());
        assert_eq!(error.detail, "the silo was declared dead");
        let shed = problem(
            StatusCode::TOO_MANY_REQUESTS,
            b"not json",
            Some(Duration::from_secs(1)),
        );
        assert_eq!(
            (shed.problem.as_str(), shed.detail.as_str()),
            ("unknown", "not json")
        );
        assert!(shed.is_retryable());
    }
}
