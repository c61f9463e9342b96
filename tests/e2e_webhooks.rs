//! End-to-end: `delayq node --handler http` signs its requests as the Standard Webhooks
//! specification says, checked by the specification's own Python library (`standardwebhooks`,
//! installed by `cargo xtask setup`, found through `DELAYQ_STANDARDWEBHOOKS_PYTHON`): each
//! request verifies with either secret during a rotation, a tampered body does not, the
//! `webhook-id` stays the same across a retry, a 429 or 503 with `Retry-After: 2` comes back
//! after about 2 s rather than on the queue's 30 s backoff, and no secret reaches the node's
//! output or a dead letter's `last_error`.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use common::recorder::{self, Answer, Recorded, Requests};
use common::{wait_until, Env, NodeProcess};
use serde_json::{json, Value};

/// `hooks` retries quickly; `busy` has a backoff far longer than the test waits, so a retry
/// within seconds was the receiver's `Retry-After`; `doomed` never retries.
const QUEUES: &str = "\
queue_defaults:
  partitions: 4
  timeout: 5s
queues:
  hooks:
    max_attempts: 3
    backoff: { initial: 100ms, max: 200ms }
  busy:
    max_attempts: 3
    backoff: { initial: 30s, max: 30s }
  doomed:
    max_attempts: 1
";

/// Three 32-byte keys, as `whsec_` secrets.
fn secret(seed: u8) -> String {
    let key: Vec<u8> = (0..32u8)
        .map(|index| index.wrapping_mul(7) ^ seed)
        .collect();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

/// The body's task id.
fn task_id(request: &Recorded) -> String {
    body_json(request)["id"].as_str().expect("an id").to_owned()
}

fn body_json(request: &Recorded) -> Value {
    serde_json::from_slice(&request.body).expect("the body is JSON")
}

/// A local receiver that records every request and answers by the task's id and how many
/// requests for it came before: `flaky-*` gets a 500 first, `busy429-*` a 429 and
/// `busy503-*` a 503 with `Retry-After: 2`, `doomed-*` always a 500; the rest, and every
/// later request, 200.
fn start_receiver() -> (String, Requests) {
    let (url, requests) = recorder::start(|request, before| {
        let id = task_id(request);
        let earlier = before.iter().filter(|r| task_id(r) == id).count();
        let (status, headers) = match (id.split('-').next(), earlier) {
            (Some("flaky"), 0) => ("500 Internal Server Error", ""),
            (Some("busy429"), 0) => ("429 Too Many Requests", "retry-after: 2\r\n"),
            (Some("busy503"), 0) => ("503 Service Unavailable", "retry-after: 2\r\n"),
            (Some("doomed"), _) => ("500 Internal Server Error", ""),
            _ => ("200 OK", ""),
        };
        Answer {
            status,
            headers: headers.to_owned(),
            body: b"no".to_vec(),
        }
    });
    (format!("{url}/hook"), requests)
}

/// Verifies each `(secret, request)` with the `standardwebhooks` library: `"ok"` or
/// `"refused: <why>"` per case.
const VERIFY: &str = r#"
import base64, json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
results = []
for case in json.load(sys.stdin):
    try:
        Webhook(case["secret"]).verify(base64.b64decode(case["body"]), case["headers"])
        results.append("ok")
    except WebhookVerificationError as error:
        results.append("refused: " + str(error))
print(json.dumps(results))
"#;

/// The Python that can import `standardwebhooks`.
fn standardwebhooks_python() -> String {
    match std::env::var("DELAYQ_STANDARDWEBHOOKS_PYTHON") {
        Ok(python) if !python.is_empty() => python,
        _ => panic!(
            "DELAYQ_STANDARDWEBHOOKS_PYTHON is not set: run `cargo xtask setup`, then `eval \"$(cargo xtask env)\"`"
        ),
    }
}

/// The library's verdict on each `(secret, headers, body)`.
fn verify(cases: &[(&str, &BTreeMap<String, String>, &[u8])]) -> Vec<String> {
    let input: Vec<Value> = cases
        .iter()
        .map(|(secret, headers, body)| {
            json!({
                "secret": secret,
                "headers": headers,
                "body": base64::engine::general_purpose::STANDARD.encode(body),
            })
        })
        .collect();
    let python = standardwebhooks_python();
    let mut child = Command::new(&python)
        .args(["-c", VERIFY])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {python} ({error}): run `cargo xtask setup`"));
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(&serde_json::to_vec(&input).expect("JSON"))
        .expect("write the cases");
    drop(stdin);
    let output = child.wait_with_output().expect("the verifier ends");
    assert!(
        output.status.success(),
        "the standardwebhooks verifier failed (run `cargo xtask setup` if it cannot import it): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the verdicts as JSON")
}

/// Starts `delayq node --handler http --url URL`, with `secrets` in DELAYQ_WEBHOOK_SECRETS
/// and `args` after, at debug level (whatever it logs, no secret may be in it).
fn spawn_http_node(env: &Env, url: &str, secrets: Option<&str>, args: &[&str]) -> NodeProcess {
    let mut command = env.command(&["node", "--handler", "http", "--url", url]);
    command.args(args).env("RUST_LOG", "debug");
    if let Some(secrets) = secrets {
        command.env("DELAYQ_WEBHOOK_SECRETS", secrets);
    }
    let node = NodeProcess::spawn("http", command);
    env.wait_for_members(1);
    node
}

fn wait_for_done(env: &Env, queue: &str, id: &str, log: &Requests) {
    wait_until(
        Duration::from_secs(30),
        &format!("{queue}/{id} to be done"),
        || env.json(&["get", queue, id])["state"] == "done",
        || {
            format!(
                "{} after {} requests",
                env.json(&["get", queue, id]),
                log.lock().expect("log lock").len()
            )
        },
    );
}

/// The requests for task `id`, in order.
fn requests_for(log: &Requests, id: &str) -> Vec<Recorded> {
    let log = log.lock().expect("log lock");
    log.iter().filter(|r| task_id(r) == id).cloned().collect()
}

/// Asserts no secret (nor its key alone) is in `text`.
fn assert_no_secret(text: &str, secrets: &[&str], what: &str) {
    for secret in secrets {
        let key = secret.trim_start_matches("whsec_");
        assert!(!text.contains(key), "a secret is in {what}: {text}");
    }
}

#[test]
fn every_request_verifies_with_either_secret_while_rotating_and_keeps_its_id_on_a_retry() {
    let env = Env::start(QUEUES);
    let (url, log) = start_receiver();
    let (old, new, stranger) = (secret(1), secret(2), secret(3));
    let node = spawn_http_node(&env, &url, Some(&format!("{old}, {new}")), &[]);
    node.wait_for_stderr("signs each request", Duration::from_secs(5));
    for id in ["plain-1", "flaky-1"] {
        env.json(&[
            "schedule",
            "hooks",
            id,
            "--in",
            "100ms",
            "--payload",
            "{\"order\":42,\"note\":\"caf\u{e9}\"}",
        ]);
    }
    wait_for_done(&env, "hooks", "plain-1", &log);
    wait_for_done(&env, "hooks", "flaky-1", &log);

    let requests = log.lock().expect("log lock").clone();
    assert_eq!(requests.len(), 3, "plain once, flaky twice: {requests:?}");
    for request in &requests {
        let signatures = &request.headers["webhook-signature"];
        assert_eq!(
            signatures.split(' ').count(),
            2,
            "one v1 signature per secret: {signatures}"
        );
        assert!(signatures.split(' ').all(|s| s.starts_with("v1,")));
        assert_eq!(request.headers["content-type"], "application/json");
        let body = body_json(request);
        assert_eq!(
            request.headers["webhook-id"],
            format!(
                "hooks:{}:{}",
                body["id"].as_str().expect("id"),
                body["generation"]
            ),
        );
    }
    let mut tampered = requests[0].body.clone();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    let mut cases: Vec<(&str, &BTreeMap<String, String>, &[u8])> = Vec::new();
    for request in &requests {
        cases.push((&old, &request.headers, &request.body));
        cases.push((&new, &request.headers, &request.body));
    }
    cases.push((&old, &requests[0].headers, &tampered));
    cases.push((&new, &requests[0].headers, &tampered));
    cases.push((&stranger, &requests[0].headers, &requests[0].body));
    let verdicts = verify(&cases);
    let (good, bad) = verdicts.split_at(2 * requests.len());
    assert!(
        good.iter().all(|verdict| verdict == "ok"),
        "each request verifies with the old and with the new secret: {verdicts:?}"
    );
    assert!(
        bad.iter().all(|verdict| verdict.starts_with("refused")),
        "a tampered body, or a secret delayq does not sign with, is refused: {verdicts:?}"
    );

    // The retry of flaky-1 is the same delivery to the receiver: the same webhook-id, a new
    // attempt in the body.
    let flaky = requests_for(&log, "flaky-1");
    assert_eq!(flaky.len(), 2, "{flaky:?}");
    assert_eq!(
        flaky[0].headers["webhook-id"], flaky[1].headers["webhook-id"],
        "the id is stable across a retry"
    );
    assert_eq!(
        (
            body_json(&flaky[0])["attempt"].clone(),
            body_json(&flaky[1])["attempt"].clone()
        ),
        (json!(1), json!(2))
    );
    // Scheduling it again is a new generation, so a new id.
    env.json(&["schedule", "hooks", "plain-1", "--in", "100ms"]);
    wait_until(
        Duration::from_secs(30),
        "plain-1 to be delivered again",
        || requests_for(&log, "plain-1").len() == 2,
        || format!("{:?}", requests_for(&log, "plain-1")),
    );
    let plain = requests_for(&log, "plain-1");
    assert_ne!(
        plain[0].headers["webhook-id"], plain[1].headers["webhook-id"],
        "a new generation is a new message"
    );
    assert_no_secret(&node.stderr_text(), &[&old, &new], "the node's output");
}

#[test]
fn a_429_or_503_with_retry_after_is_retried_then_rather_than_on_the_backoff() {
    let env = Env::start(QUEUES);
    let (url, log) = start_receiver();
    let key = secret(4);
    let file = env.dir.path().join("webhook-secrets");
    std::fs::write(&file, format!("# the current secret\n{key}\n")).expect("write the secrets");
    let file_arg = file.to_str().expect("a UTF-8 path");
    let node = spawn_http_node(&env, &url, None, &["--secrets-file", file_arg]);
    for id in ["busy429-1", "busy503-1"] {
        env.json(&["schedule", "busy", id, "--in", "100ms"]);
    }
    for id in ["busy429-1", "busy503-1"] {
        wait_for_done(&env, "busy", id, &log);
        let requests = requests_for(&log, id);
        assert_eq!(requests.len(), 2, "one refused, one accepted: {requests:?}");
        let gap = requests[1].at - requests[0].at;
        eprintln!("{id}: retried {gap:?} after the refusal with Retry-After: 2");
        // The backoff would have waited 15 to 30 s.
        assert!(
            gap >= Duration::from_millis(1800) && gap < Duration::from_secs(10),
            "{id}: retried {gap:?} after Retry-After: 2"
        );
        assert_eq!(
            requests[0].headers["webhook-id"], requests[1].headers["webhook-id"],
            "{id}: the id is stable across a retry"
        );
        assert_eq!(
            body_json(&requests[1])["attempt"],
            2,
            "the asked-for retry counts"
        );
        let verdicts = verify(&[
            (&key, &requests[0].headers, &requests[0].body),
            (&key, &requests[1].headers, &requests[1].body),
        ]);
        assert_eq!(verdicts, ["ok", "ok"], "{id}");
    }
    assert_no_secret(&node.stderr_text(), &[&key], "the node's output");
}

#[test]
fn secrets_never_reach_a_dead_letter_or_the_output_and_a_bad_one_is_refused_at_start() {
    let env = Env::start(QUEUES);
    let (url, log) = start_receiver();
    let key = secret(5);
    let node = spawn_http_node(&env, &url, Some(&key), &[]);
    env.json(&["schedule", "doomed", "doomed-1", "--in", "100ms"]);
    let dead = common::wait_for_dead(&env, "doomed", 1);
    let dead_text = dead.to_string();
    assert!(
        dead_text.contains("answered 500 Internal Server Error"),
        "{dead_text}"
    );
    assert_no_secret(&dead_text, &[&key], "the dead letter");
    assert_eq!(requests_for(&log, "doomed-1").len(), 1);
    assert_no_secret(&node.stderr_text(), &[&key], "the node's output");
    drop(node);

    // A malformed second secret: refused before the node starts, named by its position only.
    let broken = "whsec_not!base64-but-a-password";
    let mut command = env.command(&["node", "--handler", "http", "--url", &url]);
    command.env("DELAYQ_WEBHOOK_SECRETS", format!("{key} {broken}"));
    let output = common::run_with_deadline(command, None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("secret 2 of DELAYQ_WEBHOOK_SECRETS") && stderr.contains("base64"),
        "{stderr}"
    );
    assert!(!stderr.contains("not!base64-but-a-password"), "{stderr}");
    assert_no_secret(&stderr, &[&key], "the refusal");

    // Without any secret the requests go out unsigned, and the node says so at start.
    let node = spawn_http_node(&env, &url, None, &[]);
    node.wait_for_stderr("sends unsigned requests", Duration::from_secs(5));
}
