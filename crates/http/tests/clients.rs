//! The generated clients (clients/python, clients/typescript): each drives a live server
//! through the client only (tests/clients/producer.py and producer.ts: schedule, get, cancel,
//! bulk, recurring set and get, pause and resume, dead letters), and regenerating them from
//! the document with clients/generate.sh into a temporary directory gives the checked-in files
//! byte for byte, so a change to the API that is not regenerated fails here.
//!
//! Needs `cargo xtask setup` (DELAYQ_OPENAPI_PYTHON_CLIENT, whose environment's python runs
//! the Python client), node 20.19 or later and npm (the TypeScript tools are installed by
//! clients/typescript/tools.sh into target/tools/npm).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{config, node, options, redis, serve, Recorder};

const TOKEN: &str = "s3cret-token";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace directory")
}

/// `DELAYQ_OPENAPI_PYTHON_CLIENT`, or a failure that says how to get it.
fn python_generator() -> PathBuf {
    match std::env::var_os("DELAYQ_OPENAPI_PYTHON_CLIENT") {
        Some(path) if Path::new(&path).is_file() => PathBuf::from(path),
        _ => panic!(
            "openapi-python-client not found (DELAYQ_OPENAPI_PYTHON_CLIENT): run `cargo xtask \
             setup`, then `eval \"$(cargo xtask env)\"`"
        ),
    }
}

/// Runs `command` off the runtime's threads (the server answers meanwhile); fails with its
/// output unless it succeeds.
async fn run(mut command: Command, what: &str) -> Output {
    let what = what.to_owned();
    tokio::task::spawn_blocking(move || {
        let output = command
            .output()
            .unwrap_or_else(|error| panic!("cannot run {what}: {error}"));
        assert!(
            output.status.success(),
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    })
    .await
    .expect("the command's task")
}

/// A node whose handler fails tasks whose id starts with `fail` (one attempt: they become
/// dead letters), served with a token; its base URL.
async fn live_server() -> (
    delayq_testkit::RedisServer,
    delayq_engine::Scheduler,
    String,
) {
    let server = redis();
    let config = config(&server.url());
    let scheduler = node(&config, &Recorder::failing()).await;
    let mut guarded = options(&scheduler);
    guarded.token = Some(TOKEN.to_owned());
    let base = serve(&scheduler, guarded).await;
    (server, scheduler, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_drives_a_live_server() {
    let python = python_generator().with_file_name("python");
    let (_server, _scheduler, base) = live_server().await;
    let mut command = Command::new(python);
    command
        .arg(workspace().join("crates/http/tests/clients/producer.py"))
        .args([&base, TOKEN])
        .env("PYTHONPATH", workspace().join("clients/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let output = run(command, "the Python client's producer").await;
    assert!(String::from_utf8_lossy(&output.stdout).contains("python client: ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_client_drives_a_live_server() {
    let (_server, _scheduler, base) = live_server().await;
    let tools = run(
        Command::new(workspace().join("clients/typescript/tools.sh")),
        "clients/typescript/tools.sh",
    )
    .await;
    let bin = PathBuf::from(String::from_utf8_lossy(&tools.stdout).trim());

    // The generated client and the producer, compiled together with the client's tsconfig.
    let dir = tempfile::tempdir().expect("a temporary directory");
    copy_tree(
        &workspace().join("clients/typescript/src"),
        &dir.path().join("src"),
    );
    std::fs::copy(
        workspace().join("crates/http/tests/clients/producer.ts"),
        dir.path().join("src/producer.ts"),
    )
    .expect("copy the producer");
    std::fs::copy(
        workspace().join("clients/typescript/tsconfig.json"),
        dir.path().join("tsconfig.json"),
    )
    .expect("copy the tsconfig");
    let mut tsc = Command::new(bin.join("tsc"));
    tsc.args(["-p", "."]).current_dir(dir.path());
    run(tsc, "tsc (the TypeScript client and its producer)").await;

    let mut producer = Command::new("node");
    producer
        .arg(dir.path().join("dist/producer.js"))
        .args([&base, TOKEN]);
    let output = run(producer, "the TypeScript client's producer").await;
    assert!(String::from_utf8_lossy(&output.stdout).contains("typescript client: ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checked_in_clients_are_generated_from_the_current_document() {
    let generator = python_generator();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let document = dir.path().join("document.json");
    let mut text = serde_json::to_string_pretty(&delayq_http::openapi_document(true))
        .expect("the document as JSON");
    text.push('\n');
    std::fs::write(&document, text).expect("write the document");
    let out = dir.path().join("clients");
    let mut command = Command::new(workspace().join("clients/generate.sh"));
    command
        .arg(&out)
        .env("DELAYQ_OPENAPI_DOCUMENT", &document)
        .env("DELAYQ_OPENAPI_PYTHON_CLIENT", generator);
    run(command, "clients/generate.sh").await;

    let hint = "the clients differ from what clients/generate.sh makes of the current document: \
                run `clients/generate.sh` and commit the result";
    let clients = workspace().join("clients");
    for part in ["openapi.json", "python", "typescript/src/client"] {
        let wanted = files_of(&out.join(part));
        let checked_in = files_of(&clients.join(part));
        let names = |files: &BTreeMap<PathBuf, Vec<u8>>| files.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&checked_in), names(&wanted), "{part}: {hint}");
        for (name, bytes) in &wanted {
            assert!(
                checked_in.get(name) == Some(bytes),
                "{}: {hint}",
                Path::new(part).join(name).display()
            );
        }
    }
}

/// Every file under `path` (or `path` itself), by its path relative to `path`, without
/// Python's byte-code caches.
fn files_of(path: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    if path.is_file() {
        files.insert(
            PathBuf::new(),
            std::fs::read(path).expect("read a generated file"),
        );
        return files;
    }
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("list a generated directory") {
            let entry = entry.expect("a directory entry");
            let entry_path = entry.path();
            if entry.file_name() == "__pycache__" {
                continue;
            }
            if entry_path.is_dir() {
                pending.push(entry_path);
            } else {
                let relative = entry_path
                    .strip_prefix(path)
                    .expect("under the root")
                    .to_path_buf();
                files.insert(
                    relative,
                    std::fs::read(&entry_path).expect("read a generated file"),
                );
            }
        }
    }
    files
}

/// Copies the directory `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    for (relative, bytes) in files_of(from) {
        let target = to.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).expect("create a directory");
        }
        std::fs::write(target, bytes).expect("write a file");
    }
}
