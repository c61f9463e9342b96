//! The server against its own OpenAPI document: Schemathesis (PyPI `schemathesis`, found
//! through `DELAYQ_SCHEMATHESIS`, installed by `cargo xtask setup`) reads
//! `GET /v1/openapi.json` from a live server and sends what the document allows and what it
//! forbids, with every check (`--checks all`: no 5xx, every status and body as documented,
//! documented values accepted, undocumented ones refused, the token enforced), once with a
//! token and once without. Any finding fails the test. The seed is fixed and the examples
//! bounded, so a run is repeatable and takes well under a minute.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{config, options, producer, redis, serve};

/// The seed of every run: a finding reproduces with the same command.
const SEED: &str = "20260";

/// Test cases per operation and phase.
const MAX_EXAMPLES: &str = "40";

/// `DELAYQ_SCHEMATHESIS` (`<venv>/bin/st`), or a failure that says how to get it.
fn schemathesis() -> PathBuf {
    match std::env::var_os("DELAYQ_SCHEMATHESIS") {
        Some(path) if PathBuf::from(&path).is_file() => PathBuf::from(path),
        _ => panic!(
            "Schemathesis not found (DELAYQ_SCHEMATHESIS): run `cargo xtask setup`, then \
             `eval \"$(cargo xtask env)\"`"
        ),
    }
}

/// The hooks file: what the document cannot state (crates/http/tests/schemathesis_hooks.py).
fn hooks() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis_hooks.py")
}

/// A config whose body limit lets a bulk body of more than 10,000 items reach the item
/// count (400) instead of the body limit (413: not a refusal of the schema's kind).
fn roomy_config(url: &str) -> delayq_engine::config::Config {
    let mut config = config(url);
    config.engine.max_payload = delayq_storage::DEFAULT_MAX_PAYLOAD;
    config
}

/// Runs `st run` against `base` (with `Authorization: Bearer <token>` when given) and fails
/// with its whole report on any finding.
async fn run_against(base: &str, token: Option<&str>) {
    let st = schemathesis();
    let reports = tempfile::tempdir().expect("a temporary directory");
    let mut command = Command::new(&st);
    command
        .arg("run")
        .arg(format!("{base}/v1/openapi.json"))
        .args(["--checks", "all"])
        .args(["--seed", SEED])
        .args(["--max-examples", MAX_EXAMPLES])
        // One worker: hypothesis describes its strategies by parsing source, which Python
        // 3.11 does not do safely from two threads at once.
        .args(["--workers", "1"])
        .args(["--request-timeout", "10"])
        .arg("--no-color")
        .arg("--report-dir")
        .arg(reports.path())
        // Hypothesis keeps a database of past failures to replay; a test starts afresh.
        .env(
            "HYPOTHESIS_STORAGE_DIRECTORY",
            reports.path().join("hypothesis"),
        )
        .env("SCHEMATHESIS_HOOKS", hooks())
        // The hooks file is imported from the source tree: no __pycache__ beside it.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(reports.path());
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the Schemathesis task")
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", st.display()));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "Schemathesis found something ({}, token: {}):\n{report}",
        output.status,
        token.is_some()
    );
    assert!(
        report.contains("passed"),
        "Schemathesis ran no test:\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_without_a_token() {
    let server = redis();
    let config = roomy_config(&server.url());
    let scheduler = producer(&config).await;
    let base = serve(&scheduler, options(&scheduler)).await;
    run_against(&base, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_with_a_token() {
    let server = redis();
    let config = roomy_config(&server.url());
    let scheduler = producer(&config).await;
    let mut guarded = options(&scheduler);
    guarded.token = Some("s3cret-token".to_owned());
    let base = serve(&scheduler, guarded).await;
    run_against(&base, Some("s3cret-token")).await;
}
