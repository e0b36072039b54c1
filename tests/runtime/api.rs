//! The oracle's REST API as a runtime calls it: one cluster, any replica, JSON in and out.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

/// Longest a runtime waits for one answer (the oracle answers within its 5 s request timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    pub cluster: String,
}

/// What a request came to.
#[derive(Debug, Clone)]
pub enum Reply {
    Answer {
        status: u16,
        body: Value,
        retry_after: bool,
    },
    /// No answer: refused, reset, or timed out.
    Unreachable(String),
}

impl Reply {
    /// The body of a 200.
    pub fn ok(&self) -> Option<&Value> {
        match self {
            Reply::Answer {
                status: 200, body, ..
            } => Some(body),
            _ => None,
        }
    }

    /// A problem's `type` without its prefix, e.g. `store-unavailable`.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Reply::Answer { body, .. } => body["type"]
                .as_str()
                .and_then(|t| t.strip_prefix("urn:placement-oracle:problem:")),
            Reply::Unreachable(_) => None,
        }
    }

    /// A 503 with `Retry-After`: the oracle says to come back.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Reply::Answer {
                status: 503,
                retry_after: true,
                ..
            }
        )
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        match self {
            Reply::Answer { status, body, .. } => format!("{status} {body}"),
            Reply::Unreachable(error) => format!("unreachable: {error}"),
        }
    }
}

impl Api {
    pub fn new(cluster: &str) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
            cluster: cluster.to_owned(),
        }
    }

    /// `method` on `/v1/clusters/{cluster}{path}` of the replica at `base`.
    pub async fn send(&self, base: &str, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send_within(base, method, path, body, REQUEST_TIMEOUT)
            .await
    }

    /// [`Self::send`], given `timeout` instead of the usual 3 s: for a call whose work grows with
    /// what came before it (a leave releases the silo's first 5,000 activations), which a client
    /// that gives up would cancel, and cancel again on every retry.
    pub async fn send_within(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Reply {
        let url = format!("{base}/v1/clusters/{}{path}", self.cluster);
        let mut request = self.client.request(method, url).timeout(timeout);
        if let Some(body) = body {
            request = request.json(&body);
        }
        Self::fetch(request).await
    }

    /// `GET /readyz` of the replica at `base`.
    pub async fn readyz(&self, base: &str) -> Reply {
        Self::fetch(self.client.get(format!("{base}/readyz"))).await
    }

    async fn fetch(request: reqwest::RequestBuilder) -> Reply {
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let retry_after = response.headers().contains_key("retry-after");
                match response.bytes().await {
                    Ok(bytes) => Reply::Answer {
                        status,
                        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                        retry_after,
                    },
                    Err(error) => Reply::Unreachable(error.to_string()),
                }
            }
            Err(error) => Reply::Unreachable(error.to_string()),
        }
    }

    /// `PUT …/policy` over whatever version is there (`If-Match: *`).
    pub async fn put_policy(&self, base: &str, policy: Value) -> Reply {
        let url = format!("{base}/v1/clusters/{}/policy", self.cluster);
        let request = self.client.put(url).header("if-match", "*").json(&policy);
        match request.send().await {
            Ok(response) => Reply::Answer {
                status: response.status().as_u16(),
                retry_after: false,
                body: response.json().await.unwrap_or(Value::Null),
            },
            Err(error) => Reply::Unreachable(error.to_string()),
        }
    }

    pub async fn post(&self, base: &str, path: &str, body: Value) -> Reply {
        self.send(base, Method::POST, path, Some(body)).await
    }
}
