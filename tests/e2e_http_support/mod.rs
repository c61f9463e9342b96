//! What the HTTP end-to-end tests share: a `delayq serve` process, and a headless Chromium
//! page whose console is watched, with the waits and clicks the dashboard tests use.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::log::{EnableParams, EventEntryAdded, LogEntryLevel};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::handler::viewport::Viewport;
use chromiumoxide::page::{Page, ScreenshotParams};
use futures::StreamExt;

use crate::common::{logged_http_url, Env};

/// Where Debian's package puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// How long any wait of these tests may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// A running `delayq serve`, killed when dropped.
pub struct Serve {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// `http://ADDR` as it logged it.
    pub url: String,
}

impl Serve {
    /// Starts `delayq serve ARGS` with the environment `envs` and waits until it logs its URL.
    pub fn start(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> Serve {
        let mut command = env.command(&["serve"]);
        command.args(args).envs(envs.iter().copied());
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn delayq serve");
        let pipe = child.stderr.take().expect("stderr is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().expect("lock").push_str(&format!("{line}\n"));
            }
        });
        let text = || stderr.lock().expect("lock").clone();
        let deadline = Instant::now() + WAIT;
        let url = loop {
            if let Some(url) = logged_http_url(&text()) {
                break url;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("delayq serve exited with {status}: {}", text());
            }
            assert!(
                Instant::now() < deadline,
                "delayq serve did not listen: {}",
                text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Serve { child, stderr, url }
    }

    /// What it wrote on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Sends SIGTERM and waits for the exit; returns its code.
    pub fn terminate_and_wait(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not stop: {}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser: `DELAYQ_CHROMIUM` (set by `cargo xtask test`), else Debian's path. A missing
/// browser fails the test with the way to install it: the dashboard is tested in a real
/// browser or not at all, and a skipped test would pass unseen.
pub fn chromium() -> PathBuf {
    let path =
        std::env::var_os("DELAYQ_CHROMIUM").map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from);
    assert!(
        path.exists(),
        "no Chromium at {}: run `cargo xtask setup` (it installs Debian's chromium), or set DELAYQ_CHROMIUM",
        path.display()
    );
    path
}

/// A headless Chromium with one page at 1280x800 whose console is watched.
pub struct Chromium {
    browser: Browser,
    /// The one page.
    pub page: Page,
    problems: Arc<Mutex<Vec<String>>>,
    events: tokio::task::JoinHandle<()>,
    _profile: tempfile::TempDir,
}

impl Chromium {
    pub async fn launch(path: &Path) -> Chromium {
        let profile = tempfile::tempdir().expect("a browser profile directory");
        let viewport = Viewport {
            width: 1280,
            height: 800,
            ..Viewport::default()
        };
        let config = BrowserConfig::builder()
            .chrome_executable(path)
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(1280, 800)
            .viewport(viewport)
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
            .expect("a browser configuration");
        let (browser, mut handler) = Browser::launch(config).await.expect("launch chromium");
        let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
        let page = browser.new_page("about:blank").await.expect("a page");
        // Helpers the conditions below use.
        page.evaluate_on_new_document(
            "window.$text = (s) => (document.querySelector(s) || {}).textContent || '';
             window.$count = (s) => document.querySelectorAll(s).length;",
        )
        .await
        .expect("install the helpers");
        let problems = watch_console(&page).await;
        Chromium {
            browser,
            page,
            problems,
            events,
            _profile: profile,
        }
    }

    pub async fn screenshot(&self, path: &Path) {
        let params = ScreenshotParams::builder()
            .format(CaptureScreenshotFormat::Png)
            .full_page(true)
            .build();
        self.page
            .save_screenshot(params, path)
            .await
            .expect("write the screenshot");
        eprintln!("dashboard screenshot: {}", path.display());
    }

    /// Fails on console errors (but those containing one of `expected`), then closes.
    pub async fn finish(mut self, expected: &[&str]) {
        let problems: Vec<String> = self
            .problems
            .lock()
            .expect("lock")
            .iter()
            .filter(|problem| !expected.iter().any(|needle| problem.contains(needle)))
            .cloned()
            .collect();
        assert!(problems.is_empty(), "console errors: {problems:?}");
        self.browser.close().await.expect("close the browser");
        let _ = self.browser.wait().await;
        self.events.abort();
    }
}

/// Collects console errors, uncaught exceptions and failed loads.
pub async fn watch_console(page: &Page) -> Arc<Mutex<Vec<String>>> {
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
        .expect("exceptions");
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
                Some(event) = exceptions.next() => Some(format!("exception: {:?}", event.exception_details)),
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

pub async fn eval<T: serde::de::DeserializeOwned + Default>(page: &Page, script: &str) -> T {
    page.evaluate(script)
        .await
        .ok()
        .and_then(|result| result.into_value().ok())
        .unwrap_or_default()
}

/// Waits until the page's text contains every needle; returns the text.
pub async fn wait_for_text(page: &Page, needles: &[&str]) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text: String = eval(page, "document.body.innerText").await;
        if needles.iter().all(|needle| text.contains(needle)) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {needles:?}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the JavaScript condition holds.
pub async fn wait_for(page: &Page, what: &str, condition: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        if eval::<bool>(page, &format!("Boolean({condition})")).await {
            return;
        }
        let text: String = eval(page, "document.body.innerText").await;
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the page: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn click(page: &Page, selector: &str) {
    let element = page.find_element(selector).await;
    element
        .unwrap_or_else(|error| panic!("no {selector}: {error}"))
        .click()
        .await
        .unwrap_or_else(|error| panic!("click {selector}: {error}"));
}

/// Clears the input and types `text` into it.
pub async fn fill(page: &Page, selector: &str, text: &str) {
    let clear = format!("document.querySelector({selector:?}).value = ''");
    let _: bool = eval(page, &format!("{clear}, true")).await;
    let element = page
        .find_element(selector)
        .await
        .unwrap_or_else(|error| panic!("no {selector}: {error}"));
    element
        .click()
        .await
        .unwrap_or_else(|error| panic!("click {selector}: {error}"));
    element
        .type_str(text)
        .await
        .unwrap_or_else(|error| panic!("type into {selector}: {error}"));
}

/// `target/dashboard.png` of this workspace.
pub fn screenshot_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&target).expect("the target directory");
    target.join("dashboard.png")
}
