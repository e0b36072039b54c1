//! A scripted stand-in for one oracle replica, for the SDK's own rules (failover, backoff, the
//! lease, a death): it answers every request with what the script says and records what came.
//! The SDK's behaviour against the real oracle is `tests/integration.rs`.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Self {
        Self {
            status: 200,
            headers: vec![],
            body,
        }
    }

    pub fn problem(status: u16, kind: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/problem+json".into())],
            body: serde_json::json!({
                "type": format!("urn:placement-oracle:problem:{kind}"),
                "title": kind, "status": status, "detail": format!("scripted {kind}")
            }),
        }
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.headers.push(("retry-after", seconds.to_string()));
        self
    }
}

type Script = dyn Fn(&Request) -> Reply + Send + Sync;

pub struct FakeOracle {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Request>>>,
}

impl FakeOracle {
    pub async fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let recorded = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (script, recorded) = (script.clone(), recorded.clone());
                tokio::spawn(async move {
                    while let Some(request) = read_request(&mut stream).await {
                        recorded.lock().unwrap().push(request.clone());
                        let reply = script(&request);
                        let body = reply.body.to_string();
                        let mut head = format!(
                            "HTTP/1.1 {} X\r\ncontent-length: {}\r\n",
                            reply.status,
                            body.len()
                        );
                        for (name, value) in &reply.headers {
                            head.push_str(&format!("{name}: {value}\r\n"));
                        }
                        head.push_str("\r\n");
                        let sent = stream.write_all(head.as_bytes()).await;
                        if sent.is_err() || stream.write_all(body.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { url, seen }
    }

    /// The requests seen whose path contains `part`.
    pub fn count(&self, part: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path.contains(part))
            .count()
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).to_string();
    let mut first = head.lines().next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buffer.len() < end + length {
        let n = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buffer[end..end + length]).unwrap_or(Value::Null);
    Some(Request { method, path, body })
}
