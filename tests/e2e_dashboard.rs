//! End-to-end: the dashboard in a real headless Chromium (Debian's `chromium`), served by a
//! `delayq node --listen` against a real redis-server. It shows the queues, the node and a
//! dead letter; clicking Retry moves the dead letter back to pending; the page logs no
//! console error; a screenshot is written to `target/dashboard.png` for people to look at.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::log::{EnableParams, EventEntryAdded, LogEntryLevel};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::page::{Page, ScreenshotParams};
use common::{logged_http_url, wait_for_dead, Env};
use futures::StreamExt;

/// Where Debian's package puts the browser.
const CHROMIUM: &str = "/usr/bin/chromium";
const WAIT: Duration = Duration::from_secs(20);

fn chromium() -> Option<PathBuf> {
    let path =
        std::env::var_os("DELAYQ_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from);
    path.exists().then_some(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_cluster_and_retries_a_dead_letter() {
    let Some(browser_path) = chromium() else {
        eprintln!("SKIPPED dashboard_shows_the_cluster_and_retries_a_dead_letter: no Chromium at {CHROMIUM} (apt-get install -y chromium)");
        return;
    };
    let env = Env::start("queue_defaults:\n  max_attempts: 1\n  partitions: 8\n");

    // A dead letter in `payments`, made by a node that then leaves (so a retry stays pending).
    let mut failing = env.spawn_node(
        "payments",
        &[
            "--queue",
            "payments",
            "--handler",
            "exec",
            "--",
            "sh",
            "-c",
            "echo 'card declined: insufficient funds' >&2; exit 3",
        ],
    );
    env.json(&[
        "schedule",
        "payments",
        "pay-1042",
        "--in",
        "0s",
        "--payload",
        "{\"order\":1042}",
    ]);
    wait_for_dead(&env, "payments", 1);
    failing.terminate();
    assert!(failing
        .wait_exit(WAIT)
        .is_some_and(|status| status.success()));
    for (id, delay) in [("pay-2001", "20m"), ("pay-2002", "45m"), ("pay-2003", "3h")] {
        env.json(&[
            "schedule",
            "payments",
            id,
            "--in",
            delay,
            "--payload",
            "{\"amount\":1999}",
        ]);
    }

    // The node that serves the dashboard fires `orders`.
    let web = env.spawn_node("web", &["--queue", "orders", "--listen", "127.0.0.1:0"]);
    let url = logged_http_url(&web.stderr_text()).expect("the node logged its URL");
    for index in 0..20 {
        env.json(&["schedule", "orders", &format!("o-{index}"), "--in", "0s"]);
    }
    env.json(&["schedule", "orders", "o-later", "--in", "30m"]);
    common::wait_until(
        WAIT,
        "the orders to fire",
        || web.fires.distinct() == 20,
        || web.stderr_text(),
    );

    let profile = tempfile::tempdir().expect("a browser profile directory");
    let (mut browser, mut handler) = Browser::launch(
        BrowserConfig::builder()
            .chrome_executable(&browser_path)
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(1440, 1100)
            .viewport(None)
            .args([
                "--headless",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .build()
            .expect("a browser configuration"),
    )
    .await
    .expect("launch chromium");
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });

    let page = browser.new_page("about:blank").await.expect("a page");
    let problems = watch_console(&page).await;
    page.goto(url.as_str()).await.expect("open the dashboard");

    let text = wait_for_text(
        &page,
        &["payments", "orders", "card declined", "pay-2001"],
        &problems,
    )
    .await;
    assert!(text.contains("e2e"), "the node's name is shown: {text}");
    wait_for(&page, "the orders' lateness", "document.querySelector('#queues tr[data-queue=\"orders\"] td:nth-child(7)').textContent.includes('ms')").await;
    wait_for(
        &page,
        "one node row",
        "document.querySelectorAll('#nodes tbody tr').length === 1",
    )
    .await;
    let screenshot = screenshot_path();
    page.save_screenshot(
        ScreenshotParams::builder()
            .format(CaptureScreenshotFormat::Png)
            .full_page(true)
            .build(),
        &screenshot,
    )
    .await
    .expect("write the screenshot");

    // Retry the dead letter: it leaves the dead letters and is pending again.
    page.find_element("#dead tr[data-id=\"pay-1042\"] button[data-action=\"retry\"]")
        .await
        .expect("the retry button")
        .click()
        .await
        .expect("click retry");
    let deadline = Instant::now() + WAIT;
    loop {
        let task = env.json(&["get", "payments", "pay-1042"]);
        if task["state"] == "pending" {
            assert_eq!(task["attempt"], 1, "{task}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead letter was not retried: {task}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for(
        &page,
        "the dead letter to leave the table",
        "!document.querySelector('#dead tr[data-id=\"pay-1042\"]')",
    )
    .await;
    wait_for(
        &page,
        "the retried task among the upcoming",
        "document.querySelector('#pending').textContent.includes('pay-1042')",
    )
    .await;

    let problems = problems.lock().expect("lock").clone();
    assert!(problems.is_empty(), "console errors: {problems:?}");
    browser.close().await.expect("close the browser");
    let _ = browser.wait().await;
    events.abort();
    eprintln!("dashboard screenshot: {}", screenshot.display());
}

/// Collects console errors, uncaught exceptions and failed loads.
async fn watch_console(page: &Page) -> Arc<Mutex<Vec<String>>> {
    let problems = Arc::new(Mutex::new(Vec::new()));
    page.execute(EnableParams::default())
        .await
        .expect("enable the log domain");
    let mut console = page
        .event_listener::<EventConsoleApiCalled>()
        .await
        .expect("console events");
    let mut exceptions = page
        .event_listener::<EventExceptionThrown>()
        .await
        .expect("exception events");
    let mut log = page
        .event_listener::<EventEntryAdded>()
        .await
        .expect("log events");
    let sink = problems.clone();
    tokio::spawn(async move {
        loop {
            let problem = tokio::select! {
                Some(event) = console.next() => (event.r#type == ConsoleApiCalledType::Error)
                    .then(|| format!("console.error: {:?}", event.args.iter().map(|arg| arg.value.clone()).collect::<Vec<_>>())),
                Some(event) = exceptions.next() => Some(format!("exception: {:?}", event.exception_details.text)),
                Some(event) = log.next() => (event.entry.level == LogEntryLevel::Error)
                    .then(|| format!("log: {} {:?}", event.entry.text, event.entry.url)),
                else => break,
            };
            if let Some(problem) = problem {
                sink.lock().expect("lock").push(problem);
            }
        }
    });
    problems
}

/// Waits until the page's text contains every needle; returns the text.
async fn wait_for_text(page: &Page, needles: &[&str], problems: &Mutex<Vec<String>>) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text: String = page
            .evaluate("document.body.innerText")
            .await
            .ok()
            .and_then(|result| result.into_value().ok())
            .unwrap_or_default();
        if needles.iter().all(|needle| text.contains(needle)) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {needles:?}: {text}; console: {:?}",
            problems.lock().expect("lock")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the JavaScript condition holds.
async fn wait_for(page: &Page, what: &str, condition: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let holds: bool = page
            .evaluate(format!("Boolean({condition})"))
            .await
            .ok()
            .and_then(|result| result.into_value().ok())
            .unwrap_or(false);
        if holds {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `target/dashboard.png` of this workspace.
fn screenshot_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&target).expect("the target directory");
    target.join("dashboard.png")
}
