//! A minimal HTTP/1.1 client over one kept-alive connection: a request is written as bytes and its
//! answer read up to its `content-length`. Cheap per request, so that the generator, which shares
//! the machine with the oracle and Postgres, takes as little of it as it can.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One kept-alive connection to the oracle.
pub struct Connection {
    address: String,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
}

/// What came back: the status, whether it said when to retry, and the body.
pub struct Answer {
    pub status: u16,
    pub retry_after: bool,
    pub body: Vec<u8>,
}

impl Connection {
    pub fn new(address: &str) -> Self {
        Self {
            address: address.to_owned(),
            stream: None,
            buffer: Vec::with_capacity(4096),
        }
    }

    /// Sends `method path` with `body` (JSON) and reads the answer, within `timeout`; the
    /// connection is opened (again) when needed, and dropped after an error.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        authorization: Option<&str>,
        timeout: Duration,
    ) -> Result<Answer, String> {
        match tokio::time::timeout(timeout, self.exchange(method, path, body, authorization)).await
        {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => {
                self.stream = None;
                Err(error)
            }
            Err(_) => {
                self.stream = None;
                Err("timeout".to_owned())
            }
        }
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        authorization: Option<&str>,
    ) -> Result<Answer, String> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.address)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let _ = stream.set_nodelay(true);
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n",
            self.address,
            body.len()
        );
        if !body.is_empty() {
            request.push_str("content-type: application/json\r\n");
        }
        if let Some(token) = authorization {
            request.push_str(&format!("authorization: Bearer {token}\r\n"));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        stream
            .write_all(&bytes)
            .await
            .map_err(|e| format!("write: {e}"))?;
        self.buffer.clear();
        let head_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end + 4;
            }
            read_more(stream, &mut self.buffer).await?;
        };
        let head = std::str::from_utf8(&self.buffer[..head_end]).map_err(|e| e.to_string())?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("no status line")?;
        let mut length = 0usize;
        let mut retry_after = false;
        let mut close = false;
        for line in head.lines().skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().map_err(|_| "bad length")?,
                "retry-after" => retry_after = true,
                "connection" => close = value.trim().eq_ignore_ascii_case("close"),
                "transfer-encoding" => return Err("chunked answers are not read".to_owned()),
                _ => {}
            }
        }
        while self.buffer.len() < head_end + length {
            read_more(stream, &mut self.buffer).await?;
        }
        let body = self.buffer[head_end..head_end + length].to_vec();
        if close {
            self.stream = None;
        }
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<(), String> {
    let mut chunk = [0u8; 8192];
    let n = stream
        .read(&mut chunk)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if n == 0 {
        return Err("closed".to_owned());
    }
    buffer.extend_from_slice(&chunk[..n]);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
