//! The harness's side of `delayq node --handler http --url ...`: a small HTTP server that
//! stamps every POSTed task on arrival (harness clocks), appends it to the history, holds it
//! for a random time up to `hold_max` (so that faults meet handlers while they run), and
//! answers 200 (ack).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;

use super::history::{Clock, Fire, Recording};

/// The JSON the http handler posts (`task_json` in src/cli/handlers).
#[derive(Debug, Deserialize)]
struct Posted {
    queue: String,
    id: String,
    due_ms: u64,
    fired_ms: u64,
    attempt: u32,
    generation: u64,
    node: String,
    #[serde(default)]
    payload: Option<String>,
}

#[derive(Clone)]
struct Shared {
    recording: Recording,
    clock: Clock,
    hold_max_ms: u64,
}

/// The recorder's address, `http://127.0.0.1:<port>/fire`.
pub struct Recorder {
    /// Where the nodes post.
    pub url: String,
}

/// Starts the recorder on `runtime`.
pub fn start(
    runtime: &tokio::runtime::Runtime,
    recording: Recording,
    clock: Clock,
    hold_max_ms: u64,
) -> Recorder {
    let shared = Shared {
        recording,
        clock,
        hold_max_ms,
    };
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind the recorder");
    let port = listener
        .local_addr()
        .expect("the recorder's address")
        .port();
    let app = Router::new().route("/fire", post(fire)).with_state(shared);
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Recorder {
        url: format!("http://127.0.0.1:{port}/fire"),
    }
}

async fn fire(State(shared): State<Shared>, body: axum::body::Bytes) -> StatusCode {
    let received = shared.clock.now();
    let Ok(posted) = serde_json::from_slice::<Posted>(&body) else {
        // Recorded anyway, as a fire no schedule explains: the checker reports it.
        shared.recording.fire(Fire {
            queue: String::new(),
            id: String::new(),
            due_ms: 0,
            fired_ms: 0,
            attempt: 0,
            generation: 0,
            node: String::new(),
            payload: String::from_utf8_lossy(&body).into_owned(),
            received,
        });
        return StatusCode::OK;
    };
    shared.recording.fire(Fire {
        queue: posted.queue,
        id: posted.id,
        due_ms: posted.due_ms,
        fired_ms: posted.fired_ms,
        attempt: posted.attempt,
        generation: posted.generation,
        node: posted.node,
        payload: posted.payload.unwrap_or_default(),
        received,
    });
    let hold = rand::random_range(0..=shared.hold_max_ms);
    tokio::time::sleep(Duration::from_millis(hold)).await;
    StatusCode::OK
}
