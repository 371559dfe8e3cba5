//! A request refused before its body was read is answered with `Connection: close` (and the
//! connection is then closed), while one whose body was read keeps the connection for the next.
//! Spoken over a raw TCP connection, as an HTTP/1.1 client that keeps connections alive does.

use std::collections::BTreeMap;
use std::time::Duration;

use banhub_tests::HubProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one answer may take.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// One answer: its status, its headers (names in lower case) and its body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
}

/// A keep-alive HTTP/1.1 connection to the hub.
struct Connection {
    stream: TcpStream,
    host: String,
    /// Bytes read past the previous answer.
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(hub: &HubProcess) -> Self {
        let address = hub.listening().http;
        let stream = TcpStream::connect(address).await.expect("connect");
        Self {
            stream,
            host: address.to_string(),
            buffer: Vec::new(),
        }
    }

    /// Sends `POST path` with `headers` and `body`, and reads the answer.
    async fn post(&mut self, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        self.stream
            .write_all(request.as_bytes())
            .await
            .expect("send");
        tokio::time::timeout(ANSWER_DEADLINE, self.answer())
            .await
            .expect("an answer in time")
    }

    async fn answer(&mut self) -> Answer {
        let end = loop {
            if let Some(end) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            self.fill().await;
        };
        let head = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
        self.buffer.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .expect("a status line");
        let headers: BTreeMap<String, String> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let length: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .expect("answers have a Content-Length");
        while self.buffer.len() < length {
            self.fill().await;
        }
        self.buffer.drain(..length);
        Answer { status, headers }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await.expect("read");
        assert!(
            n > 0,
            "the hub closed the connection in the middle of an answer"
        );
        self.buffer.extend_from_slice(&chunk[..n]);
    }

    /// Whether the hub closes the connection (end of stream) within the deadline.
    async fn closed_by_hub(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(
            tokio::time::timeout(ANSWER_DEADLINE, self.stream.read(&mut chunk)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

#[tokio::test]
async fn refusals_before_the_body_is_read_close_the_connection_and_say_so() {
    let hub = HubProcess::start().expect("hub");
    let bearer = format!("Bearer {}", hub.admin_token());
    let json = ("Content-Type", "application/json");
    let body = format!("{{\"name\":\"{}\"}}", "x".repeat(2_000));

    // Refused before the body is read: no credentials (401), the wrong media type (415).
    let unauthenticated = [json];
    let wrong_media_type = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "text/plain"),
    ];
    let refusals = [
        ("unauthenticated", &unauthenticated[..], 401),
        ("wrong media type", &wrong_media_type[..], 415),
    ];
    for (what, headers, status) in refusals {
        let mut connection = Connection::open(&hub).await;
        let answer = connection.post("/api/servers", headers, &body).await;
        assert_eq!(answer.status, status, "{what}: {answer:?}");
        assert_eq!(
            answer.headers.get("connection").map(String::as_str),
            Some("close"),
            "{what}: {answer:?}"
        );
        assert!(
            connection.closed_by_hub().await,
            "{what}: the connection stayed open"
        );
    }

    // A body the hub read (and refused: a field of the wrong type) keeps the connection for the
    // next request.
    let mut connection = Connection::open(&hub).await;
    let headers = [("Authorization", bearer.as_str()), json];
    let answer = connection
        .post("/api/servers", &headers, "{\"name\": 5}")
        .await;
    assert_eq!(answer.status, 422, "{answer:?}");
    assert_eq!(answer.headers.get("connection"), None, "{answer:?}");
    let answer = connection
        .post("/api/servers", &headers, "{\"name\":\"kept-alive\"}")
        .await;
    assert_eq!(
        answer.status, 201,
        "the next request on the same connection: {answer:?}"
    );
}
