//! A local HTTP/1.1 server for the end-to-end tests that records every request (its line,
//! headers and body, and when it arrived) and answers each as the test says: a webhook
//! receiver, an OTLP collector.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One request the server got.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST /hook HTTP/1.1`.
    pub line: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

/// The requests so far, in arrival order.
pub type Requests = Arc<Mutex<Vec<Recorded>>>;

/// What the server answers: the status line's code and text, extra header lines (each ending
/// in `\r\n`) and a body.
pub struct Answer {
    pub status: &'static str,
    pub headers: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// `200 OK` with `body`.
    pub fn ok(body: &[u8]) -> Self {
        Answer {
            status: "200 OK",
            headers: String::new(),
            body: body.to_vec(),
        }
    }
}

/// Starts a server on a free local port; `answer` gets each request and the requests before
/// it. Returns `http://127.0.0.1:<port>` and the requests.
pub fn start(
    answer: impl Fn(&Recorded, &[Recorded]) -> Answer + Send + 'static,
) -> (String, Requests) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let requests: Requests = Arc::default();
    let log = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let Some(request) = read_request(&mut reader) else {
                continue;
            };
            let reply = {
                let mut log = log.lock().expect("requests lock");
                let reply = answer(&request, &log);
                log.push(request);
                reply
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {}\r\n{}content-length: {}\r\nconnection: close\r\n\r\n",
                reply.status,
                reply.headers,
                reply.body.len()
            );
            let _ = stream.write_all(&reply.body);
        }
    });
    (url, requests)
}

/// Reads one HTTP/1.1 request (request line, headers, a `Content-Length` body).
fn read_request(reader: &mut impl BufRead) -> Option<Recorded> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length = headers
        .get("content-length")
        .map_or(Some(0), |length| length.parse().ok())?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        line: line.trim_end().to_owned(),
        headers,
        body,
        at: Instant::now(),
    })
}
