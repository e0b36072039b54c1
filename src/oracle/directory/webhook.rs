//! Asking an operator's endpoint to choose among the candidates (the `webhook` strategy).
//!
//! The oracle POSTs the grain and its candidates (after compatibility and filters) and expects
//! `{"silo": "…"}` back within the grain type's `timeout_ms`. A slow, failing or nonsensical
//! answer is counted and the type's fallback strategy decides instead, so a broken endpoint
//! degrades placement quality, never availability.
//!
//! Whoever writes a policy chooses the URL, so the call is fenced in: the host must be on this
//! replica's allow-list ([`WebhookHosts`], checked again here because a stored policy may predate
//! the list or come from a replica configured differently), redirects are not followed (they
//! would lead past the list), and at most [`MAX_ANSWER_BYTES`] of an answer are read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::{Ask, Directory};
use crate::cluster::{ClusterName, LoadReport, SiloId};
use crate::oracle::outside_waits;
use crate::placement::webhook_hosts::WebhookHosts;
use crate::placement::{self, ClusterView, PlacementInput, Strategy};
use crate::policy::Policy;
use crate::telemetry::metric;

/// Most bytes of an answer read. `{"silo": …}` needs a few hundred; the cap keeps an endpoint
/// that streams without end from holding memory (a webhook call is made per placement, many at
/// once). Beyond it the call counts as `too_large` and the fallback decides.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The client for webhook calls: no redirects, so the host called is always the host checked
/// (a 3xx answer counts as `error`).
pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // Fails only if the TLS backend cannot start, as `Client::new` (which panics) would.
        .expect("the HTTP client for webhooks builds")
}

/// What the endpoint receives.
#[derive(Debug, Serialize)]
struct Question {
    cluster: String,
    grain: String,
    grain_type: String,
    requesting_silo: Option<String>,
    candidates: Vec<Candidate>,
}

#[derive(Debug, Serialize)]
struct Candidate {
    silo: String,
    address: String,
    role: Option<String>,
    metadata: BTreeMap<String, String>,
    load: LoadReport,
    smoothed_cpu_usage: Option<f64>,
    smoothed_memory_usage_bytes: Option<u64>,
}

/// What the endpoint answers.
#[derive(Debug, Deserialize)]
struct Answer {
    silo: String,
}

impl Directory {
    /// Asks the endpoints of every pending `webhook` request (concurrently) and returns the valid
    /// choices by request position. Requests whose hint already decides, or that have no
    /// candidates, are not sent.
    pub(super) async fn ask_webhooks(
        &self,
        cluster: &ClusterName,
        view: &ClusterView,
        policy: &Policy,
        asks: &[Ask<'_>],
    ) -> Vec<Option<SiloId>> {
        let mut calls = JoinSet::new();
        for (i, grain) in asks
            .iter()
            .enumerate()
            .filter(|(_, grain)| grain.strategy == Strategy::Webhook)
        {
            let request = grain.request;
            let resolved = policy.resolve(request.grain.grain_type(), Some(Strategy::Webhook));
            let Some(url) = resolved.options.webhook.url.clone() else {
                metric::webhook_call("unconfigured", Duration::ZERO);
                continue;
            };
            let question = placement::Request {
                input: PlacementInput {
                    grain: &request.grain,
                    requesting_silo: request.requesting_silo.as_ref(),
                    hint: request.hint.as_ref(),
                },
                strategy: Strategy::Webhook,
                options: resolved.options,
                filters: resolved.filters,
                chosen_by_webhook: None,
                explain: false,
            };
            let Ok((candidates, _)) = placement::candidates(view, &question) else {
                continue;
            };
            let hinted = request
                .hint
                .as_ref()
                .is_some_and(|hint| candidates.iter().any(|c| &c.id == hint));
            if candidates.is_empty() || hinted {
                continue;
            }
            let Some(target) = permitted(&self.webhooks.hosts, &url, request.grain.grain_type())
            else {
                continue;
            };
            outside_waits::note_waiting_outside();
            let allowed: Vec<String> = candidates.iter().map(|c| c.id.to_string()).collect();
            let body = Question {
                cluster: cluster.to_string(),
                grain: request.grain.to_string(),
                grain_type: request.grain.grain_type().to_owned(),
                requesting_silo: request.requesting_silo.as_ref().map(ToString::to_string),
                candidates: candidates
                    .iter()
                    .map(|c| Candidate {
                        silo: c.id.to_string(),
                        address: c.profile.address.clone(),
                        role: c.profile.role.clone(),
                        metadata: c.profile.metadata.clone(),
                        load: c.profile.load.clone(),
                        smoothed_cpu_usage: c.profile.smoothing.cpu_usage,
                        smoothed_memory_usage_bytes: c.profile.smoothing.memory_usage_bytes,
                    })
                    .collect(),
            };
            let timeout = Duration::from_millis(u64::from(resolved.options.webhook.timeout_ms));
            let http = self.webhooks.http.clone();
            calls.spawn(async move {
                let started = Instant::now();
                let answer = ask(&http, target.url, &body, timeout).await;
                let (outcome, choice) = match answer {
                    Ok(silo) if allowed.contains(&silo) => ("chosen", SiloId::parse("silo", &silo).ok()),
                    Ok(_) => ("invalid", None),
                    Err(outcome) => (outcome, None),
                };
                metric::webhook_call(outcome, started.elapsed());
                if outcome != "chosen" {
                    // The host only: the rest of the URL may carry credentials.
                    tracing::warn!(host = target.host, outcome, grain = %body.grain, "placement webhook did not decide; using the fallback strategy");
                }
                (i, choice)
            });
        }
        let mut choices = vec![None; asks.len()];
        while let Some(done) = calls.join_next().await {
            if let Ok((i, Some(silo))) = done {
                choices[i] = Some(silo);
            }
        }
        choices
    }
}

/// A URL that passed the allow-list, with the host to name in logs.
struct Target {
    url: reqwest::Url,
    host: String,
}

/// The URL to call, or `None` (counted as `forbidden` and logged with the reason) when this
/// replica may not call it.
fn permitted(hosts: &WebhookHosts, url: &str, grain_type: &str) -> Option<Target> {
    match hosts.check(url) {
        Ok(url) => Some(Target {
            host: url.host_str().unwrap_or_default().to_owned(),
            url,
        }),
        Err(refusal) => {
            metric::webhook_call("forbidden", Duration::ZERO);
            tracing::warn!(
                grain_type,
                "placement webhook not called: its URL {refusal}; using the fallback strategy"
            );
            None
        }
    }
}

/// One call: the chosen silo id, or the outcome to count (`timeout`, `error`, `invalid`,
/// `too_large`).
async fn ask(
    http: &reqwest::Client,
    url: reqwest::Url,
    question: &Question,
    timeout: Duration,
) -> Result<String, &'static str> {
    let timed_out = |e: reqwest::Error| if e.is_timeout() { "timeout" } else { "error" };
    let mut response = http
        .post(url)
        .json(question)
        .timeout(timeout)
        .send()
        .await
        .map_err(timed_out)?;
    // Not a success, and not followed: a 3xx is an `error` like any other.
    if !response.status().is_success() {
        return Err("error");
    }
    if response
        .content_length()
        .is_some_and(|length| length > MAX_ANSWER_BYTES as u64)
    {
        return Err("too_large");
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(timed_out)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err("too_large");
        }
        body.extend_from_slice(&chunk);
    }
    let answer: Answer = serde_json::from_slice(&body).map_err(|_| "invalid")?;
    Ok(answer.silo)
}
