//! End-to-end: the dashboard in a real headless Chromium (Debian's `chromium`), against a
//! real redis-server and real `delayq` processes, at laptop size (1280x800).
//!
//! - Served by a `delayq node --listen`: it shows the queues (with the node's lateness),
//!   the node, upcoming tasks and dead letters; a look-up by id works; a task scheduled
//!   after the page loaded appears without a reload; Retry and Purge (through the page's
//!   confirmation) act on one dead letter; the recurring schedules are listed with their
//!   cadence, next tick and counts, and Pause / Resume act on one (the API agrees); Pause
//!   on a queue's row shows it paused (and `delayq stats --json` agrees), Resume undoes it; a
//!   queue with flow keys shows its held-back count and the key holding tasks back (running
//!   and waiting), gone once its handler goes on; a screenshot goes to `target/dashboard.png`.
//! - Served by `delayq serve` with a token: the page asks for the token once (again only
//!   after a refused one), sends it as a header (no cookie), lists a node that joined after
//!   it started, retries and purges all the dead letters of a queue, and pauses a recurring
//!   schedule and a queue (the buttons send the token too).
//!
//! - A link whose `#queue=` fragment is malformed (a percent-encoding `decodeURIComponent`
//!   rejects, markup, an unknown queue) leaves the page listing the queues and refreshing,
//!   with a notice and no queue of the fragment's; nothing of it becomes markup.
//! - Behind a reverse proxy that serves the page at `/prefix/` and strips the prefix, the
//!   page, its assets, its refreshes and its actions all go through the proxy.
//!
//! Against the page before issue 17 item 11 both of these failed: under `#queue=%E0%A4%A` the
//! script died on `decodeURIComponent` (the page stayed at "loading…"), and behind the proxy
//! its absolute `<base href="/">` sent every request outside `/prefix/`.
//!
//! No page may log a console error. Without Chromium both tests print one SKIPPED line
//! (past the test harness's output capture) and pass.

mod common;
mod e2e_http_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chromiumoxide::page::Page;
use common::{logged_http_url, wait_for_dead, wait_until, Env, NodeProcess};
use e2e_http_support::{
    chromium, click, eval, fill, screenshot_path, wait_for, wait_for_text, Chromium, Serve, WAIT,
};

/// One browser at a time: the machine running the suite may be small.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_a_node_shows_the_cluster_and_acts_on_dead_letters() {
    let chromium = chromium();
    let env = Env::start(
        "queue_defaults:\n  max_attempts: 1\n  partitions: 8\n\
         queues:\n  webhooks:\n    flow_keys: true\n    per_key_concurrency: 1\n    timeout: 60s\n",
    );
    let mut failing = failing_node(&env, &["payments"]);
    for id in ["pay-1042", "pay-1043"] {
        env.json(&[
            "schedule",
            "payments",
            id,
            "--in",
            "0s",
            "--payload",
            "{\"order\":1042}",
        ]);
    }
    wait_for_dead(&env, "payments", 2);
    stop(&mut failing);
    for (id, delay) in [("pay-2001", "20m"), ("pay-2002", "45m"), ("pay-2003", "3h")] {
        let payload = "{\"amount\":1999,\"currency\":\"EUR\"}";
        env.json(&[
            "schedule",
            "payments",
            id,
            "--in",
            delay,
            "--payload",
            payload,
        ]);
    }
    let mut command = env.command(&["node", "--queue", "orders", "--listen", "127.0.0.1:0"]);
    command.env("DELAYQ_NODE_NAME", "web-1");
    let web = NodeProcess::spawn("web-1", command);
    let url = logged_http_url(&web.stderr_text()).expect("the node logged its URL");
    for index in 0..20 {
        env.json(&["schedule", "orders", &format!("o-{index}"), "--in", "0s"]);
    }
    env.json(&["schedule", "orders", "o-later", "--in", "30m"]);
    wait_until(
        WAIT,
        "the orders to fire",
        || web.fires.distinct() == 20,
        || web.stderr_text(),
    );
    let nightly = env.json(&[
        "recurring",
        "set",
        "nightly-report",
        "--queue",
        "reports",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
    ]);
    assert_eq!(nightly["result"], "created", "{nightly}");
    // Ticks into a queue the node serves: the page shows them fired.
    env.json(&[
        "recurring",
        "set",
        "heartbeat",
        "--queue",
        "orders",
        "--every",
        "1s",
    ]);

    let _one = ONE_BROWSER.lock().await;
    let browser = Chromium::launch(&chromium).await;
    let page = &browser.page;
    page.goto(url.as_str()).await.expect("open the dashboard");
    let text = wait_for_text(
        page,
        &["payments", "orders", "card declined", "pay-2001", "web-1"],
    )
    .await;
    assert!(!text.contains("Token required"), "no token, no dialog");
    wait_for(
        page,
        "the orders' lateness",
        "$text('#queues tr[data-queue=\"orders\"] td:nth-child(8)').includes('ms')",
    )
    .await;
    wait_for(
        page,
        "two dead letters",
        "$count('#dead tr[data-id]') === 2",
    )
    .await;
    wait_for(
        page,
        "one node",
        "$count('#nodes tbody tr[data-node]') === 1",
    )
    .await;

    // The recurring schedules: cadence with its zone, the next tick, the counts.
    wait_for(
        page,
        "two recurring schedules",
        "$count('#recurring tr[data-schedule]') === 2",
    )
    .await;
    let row: String = eval(page, &schedule_row_text("nightly-report")).await;
    for needle in [
        "reports",
        "0 9 * * *",
        "Europe/Berlin",
        "in ",
        "never",
        "active",
        "once",
    ] {
        assert!(row.contains(needle), "{needle:?} in the nightly row: {row}");
    }
    wait_for(
        page,
        "the heartbeat's ticks fired",
        "$text('#recurring tr[data-schedule=\"heartbeat\"]').includes('ago') && Number($text('#recurring tr[data-schedule=\"heartbeat\"] td:nth-child(8)')) >= 1",
    )
    .await;
    wait_for(
        page,
        "the schedules' table to fit its card at laptop width (the buttons in sight)",
        "document.querySelector('#recurring').scrollWidth <= document.querySelector('#recurring').parentElement.clientWidth",
    )
    .await;
    let heartbeat: String = eval(page, &schedule_row_text("heartbeat")).await;
    assert!(heartbeat.contains("every 1s"), "{heartbeat}");

    // Look-up by id.
    fill(page, "#lookup input[name=queue]", "payments").await;
    fill(page, "#lookup input[name=id]", "pay-2001").await;
    click(page, "#lookup button[type=submit]").await;
    wait_for(
        page,
        "the looked-up task",
        "$text('#lookup-result .state') === 'pending'",
    )
    .await;
    let found: String = eval(page, "$text('#lookup-result dl')").await;
    assert!(
        found.contains("pay-2001")
            && found.contains(r#"{"amount":1999"#)
            && !found.contains("[object"),
        "the look-up lists the task's fields: {found}"
    );
    wait_for(
        page,
        "the page to stay at laptop width",
        "document.documentElement.scrollWidth <= window.innerWidth",
    )
    .await;

    // The page refreshes itself: a task scheduled now appears without a reload.
    env.json(&["schedule", "payments", "pay-3000", "--in", "10m"]);
    wait_for(
        page,
        "pay-3000 among the upcoming",
        "$text('#pending').includes('pay-3000')",
    )
    .await;
    browser.screenshot(&screenshot_path()).await;

    // Pause, then resume, one schedule from its row; the API agrees each time.
    pause_from_the_page(&env, page, "nightly-report", true).await;
    let paused: String = eval(page, &schedule_row_text("nightly-report")).await;
    assert!(
        paused.contains("paused") && paused.contains("—"),
        "{paused}"
    );
    pause_from_the_page(&env, page, "nightly-report", false).await;
    let resumed: String = eval(page, &schedule_row_text("nightly-report")).await;
    assert!(
        resumed.contains("active") && resumed.contains("in "),
        "{resumed}"
    );

    // Pause, then resume, a queue from its row; `delayq stats --json` agrees each time.
    let row = "$text('#queues tr[data-queue=\"payments\"]')";
    assert!(eval::<String>(page, row).await.contains("active"));
    pause_queue_from_the_page(&env, page, "payments", true).await;
    let paused: String = eval(page, row).await;
    assert!(
        paused.contains("paused") && paused.contains("Resume"),
        "{paused}"
    );
    pause_queue_from_the_page(&env, page, "payments", false).await;
    let resumed: String = eval(page, row).await;
    assert!(
        resumed.contains("active") && resumed.contains("Pause"),
        "{resumed}"
    );

    // Retry one: pending again with attempt 1, gone from the dead letters.
    click(
        page,
        "#dead tr[data-id=\"pay-1042\"] button[data-action=\"retry\"]",
    )
    .await;
    wait_until(
        WAIT,
        "pay-1042 pending again",
        || {
            let task = env.json(&["get", "payments", "pay-1042"]);
            task["state"] == "pending" && task["attempt"] == 1
        },
        || env.json(&["get", "payments", "pay-1042"]).to_string(),
    );
    wait_for(
        page,
        "pay-1042 to leave the dead letters",
        "!document.querySelector('#dead tr[data-id=\"pay-1042\"]')",
    )
    .await;
    wait_for(
        page,
        "pay-1042 among the upcoming",
        "$text('#pending').includes('pay-1042')",
    )
    .await;

    // Purge one, through the page's confirmation.
    click(
        page,
        "#dead tr[data-id=\"pay-1043\"] button[data-action=\"purge\"]",
    )
    .await;
    wait_for(
        page,
        "the confirmation",
        "document.getElementById('confirm-dialog').open",
    )
    .await;
    click(page, "#confirm-ok").await;
    wait_until(
        WAIT,
        "pay-1043 purged",
        || !env.run(&["get", "payments", "pay-1043"]).status.success(),
        String::new,
    );
    wait_for(
        page,
        "no dead letters left",
        "$text('#dead').includes('No dead letters')",
    )
    .await;

    // Flow keys: a node on webhooks whose handler waits for a file; the key api.example.com
    // runs one task at a time, so two of its three are held back, in the queue's row and in
    // the keys of the selected queue; once the handler goes on, no key holds any back.
    let go = env.dir.path().join("go");
    let mut gated = gated_node(&env, "webhooks", &go);
    for n in 0..3 {
        let id = format!("hook:{{api.example.com}}:{n}");
        env.json(&["schedule", "webhooks", &id, "--in", "0s"]);
    }
    wait_until(
        WAIT,
        "two webhooks held back",
        || env.stats("webhooks")["held_back"] == 2,
        || format!("{:?}", env.stats("webhooks")),
    );
    wait_for(
        page,
        "the webhooks row",
        "$text('#queues tr[data-queue=\"webhooks\"] td[data-cell=\"held-back\"]') === '2'",
    )
    .await;
    click(page, "#queues tr[data-queue=\"webhooks\"] td.queue").await;
    let key = "#keys tr[data-key=\"api.example.com\"]";
    wait_for(
        page,
        "the key holding tasks back",
        &format!(
            "$text('{key} td:nth-child(2)') === '1' && $text('{key} td:nth-child(3)') === '2'"
        ),
    )
    .await;
    assert!(
        eval::<String>(page, &format!("$text('{key} td:nth-child(4)')"))
            .await
            .ends_with('s'),
        "the longest wait is a duration"
    );
    assert!(
        eval::<String>(page, "$text('#keys-hint')")
            .await
            .starts_with("2 held back"),
        "the hint counts the queue's held-back tasks"
    );
    std::fs::write(&go, "").expect("let the handler go");
    wait_for(
        page,
        "no key holding tasks back",
        "$text('#keys').includes('No flow key holds tasks back') && $text('#queues tr[data-queue=\"webhooks\"] td[data-cell=\"held-back\"]') === '0'",
    )
    .await;
    stop(&mut gated);

    browser.finish(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_of_serve_asks_for_the_token_once_and_retries_and_purges_all() {
    let chromium = chromium();
    let env = Env::start("queue_defaults:\n  max_attempts: 1\n  partitions: 4\n");
    let mut failing = failing_node(&env, &["jobs", "mail"]);
    for id in ["job-1", "job-2", "job-3"] {
        env.json(&["schedule", "jobs", id, "--in", "0s"]);
    }
    env.json(&["schedule", "mail", "mail-1", "--in", "0s"]);
    env.json(&["schedule", "mail", "mail-2", "--in", "0s"]);
    wait_for_dead(&env, "jobs", 3);
    wait_for_dead(&env, "mail", 2);
    stop(&mut failing);
    env.json(&[
        "recurring",
        "set",
        "sweep",
        "--queue",
        "jobs",
        "--every",
        "1h",
    ]);
    let serve = Serve::start(
        &env,
        &["--listen", "127.0.0.1:0"],
        &[("DELAYQ_HTTP_TOKEN", "t0ken")],
    );
    // A node that joins after `serve` started must still show up on its page.
    let mut command = env.command(&["node", "--queue", "other"]);
    command.env("DELAYQ_NODE_NAME", "late-joiner");
    let _late = NodeProcess::spawn("late-joiner", command);

    let _one = ONE_BROWSER.lock().await;
    let browser = Chromium::launch(&chromium).await;
    let page = &browser.page;
    // Counts the token prompts, across reloads of the tab.
    page.evaluate_on_new_document(
        "const show = HTMLDialogElement.prototype.showModal;
         HTMLDialogElement.prototype.showModal = function () {
           if (this.id === 'token-dialog') sessionStorage.setItem('asks', String(Number(sessionStorage.getItem('asks') || 0) + 1));
           return show.call(this);
         };",
    )
    .await
    .expect("install the prompt counter");
    page.goto(serve.url.as_str())
        .await
        .expect("open the dashboard");
    wait_for(
        page,
        "the token prompt",
        "document.getElementById('token-dialog').open",
    )
    .await;
    fill(page, "#token-input", "wrong").await;
    click(page, "#token-form button[type=submit]").await;
    wait_for(page, "the prompt again, saying it was refused", "document.getElementById('token-dialog').open && !document.getElementById('token-refused').hidden").await;
    fill(page, "#token-input", "t0ken").await;
    click(page, "#token-form button[type=submit]").await;
    wait_for_text(page, &["jobs", "mail", "late-joiner"]).await;
    assert_stays_signed_in(page).await;

    pause_from_the_page(&env, page, "sweep", true).await;
    pause_queue_from_the_page(&env, page, "mail", true).await;
    pause_queue_from_the_page(&env, page, "mail", false).await;

    click(page, "#queues tr[data-queue=\"jobs\"]").await;
    wait_for(page, "three dead jobs", "$count('#dead tr[data-id]') === 3").await;
    click(page, "#retry-all").await;
    wait_until(
        WAIT,
        "the jobs pending again",
        || {
            let stats = env.stats("jobs");
            stats["dead"] == 0 && stats["pending"] == 3
        },
        || format!("{:?}", env.stats("jobs")),
    );
    wait_for(
        page,
        "the retried jobs among the upcoming",
        "$count('#pending tr[data-id]') === 3",
    )
    .await;

    click(page, "#queues tr[data-queue=\"mail\"]").await;
    wait_for(page, "two dead mails", "$count('#dead tr[data-id]') === 2").await;
    click(page, "#purge-all").await;
    wait_for(
        page,
        "the confirmation",
        "document.getElementById('confirm-dialog').open",
    )
    .await;
    click(page, "#confirm-ok").await;
    wait_until(
        WAIT,
        "the mail dead letters purged",
        || env.stats("mail")["dead"] == 0,
        || format!("{:?}", env.stats("mail")),
    );

    page.reload().await.expect("reload");
    wait_for_text(page, &["jobs", "mail", "late-joiner"]).await;
    assert_stays_signed_in(page).await;
    // The prompt's own 401s are the browser's network log, not errors of the page.
    browser.finish(&["401 (Unauthorized)"]).await;
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_survives_a_malformed_queue_fragment() {
    let chromium = chromium();
    let env = Env::start("queue_defaults:\n  partitions: 4\n");
    env.json(&["schedule", "alpha", "a-1", "--in", "1h"]);
    env.json(&["schedule", "beta", "b-1", "--in", "1h"]);
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0"], &[]);

    let _one = ONE_BROWSER.lock().await;
    let browser = Chromium::launch(&chromium).await;
    let page = &browser.page;
    // (fragment, whether the page says it ignored it)
    let fragments = [
        // decodeURIComponent throws URIError on these two.
        ("#queue=%E0%A4%A", true),
        ("#queue=%", true),
        ("#queue=", false),
        ("#queue=<script>window.injected=1</script>", true),
        (
            "#queue=%3Cimg%20src%3Dx%20onerror%3D%22window.injected%3D2%22%3E",
            true,
        ),
        ("#queue=no-such-queue", true),
        ("#x=1&queue=%ZZ&y=2", true),
    ];
    for (index, (fragment, noticed)) in fragments.into_iter().enumerate() {
        open_afresh(page, &format!("{}/{fragment}", serve.url)).await;
        // Not blank: the queues are listed, the first one selected as with no fragment.
        wait_for(
            page,
            &format!("the queue list under {fragment}"),
            "$count('#queues tr[data-queue]') === 2",
        )
        .await;
        wait_for(
            page,
            &format!("alpha selected under {fragment}"),
            "$text('#queues tr.selected td.queue') === 'alpha' && $text('#pending').includes('a-1')",
        )
        .await;
        if noticed {
            wait_for(
                page,
                &format!("the notice about {fragment}"),
                "!document.getElementById('toast').hidden && $text('#toast').includes('Ignored the link')",
            )
            .await;
            assert!(
                !eval::<String>(page, "location.hash")
                    .await
                    .contains("queue="),
                "the bad fragment is dropped from the address"
            );
        }
        let injected: String = eval(
            page,
            "String(window.injected) + ' ' + $count('img') + ' ' + $count('script')",
        )
        .await;
        assert_eq!(
            injected, "undefined 0 1",
            "nothing of {fragment} became markup"
        );
        for label in ["#upcoming-title", "#dead-title"] {
            let text: String = eval(page, &format!("$text('{label}')")).await;
            assert!(
                !text.contains('<') && !text.contains('%'),
                "{label}: {text}"
            );
        }
        // Still polling: a task scheduled now shows up without a reload.
        if index == 0 {
            env.json(&["schedule", "alpha", "a-2", "--in", "2h"]);
            wait_for(
                page,
                "a-2 among the upcoming",
                "$text('#pending').includes('a-2')",
            )
            .await;
        }
        assert_keeps_refreshing(page).await;
    }

    // A fragment naming a queue that exists still selects it.
    open_afresh(page, &format!("{}/#queue=beta", serve.url)).await;
    wait_for(
        page,
        "beta selected",
        "$text('#queues tr.selected td.queue') === 'beta' && $text('#pending').includes('b-1')",
    )
    .await;
    assert_eq!(eval::<String>(page, "location.hash").await, "#queue=beta");
    browser.finish(&[]).await;
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_works_behind_a_proxy_that_strips_a_path_prefix() {
    let chromium = chromium();
    let env = Env::start("queue_defaults:\n  partitions: 4\n");
    env.json(&["schedule", "orders", "o-1", "--in", "1h"]);
    env.json(&["schedule", "payments", "p-1", "--in", "2h"]);
    let serve = Serve::start(&env, &["--listen", "127.0.0.1:0"], &[]);
    let proxy = Proxy::start(&serve.url).await;

    let _one = ONE_BROWSER.lock().await;
    let browser = Chromium::launch(&chromium).await;
    let page = &browser.page;
    let url = format!("{}/prefix/", proxy.url);
    page.goto(url.as_str()).await.expect("open the dashboard");
    wait_for_text(page, &["orders", "payments", "o-1"]).await;
    assert_eq!(eval::<String>(page, "document.baseURI").await, url);
    assert_keeps_refreshing(page).await;

    // The actions go through the proxy too.
    click(page, "#queues tr[data-queue=\"payments\"]").await;
    wait_for(
        page,
        "payments' upcoming tasks",
        "$text('#pending').includes('p-1')",
    )
    .await;
    pause_queue_from_the_page(&env, page, "orders", true).await;
    pause_queue_from_the_page(&env, page, "orders", false).await;
    fill(page, "#lookup input[name=queue]", "orders").await;
    fill(page, "#lookup input[name=id]", "o-1").await;
    click(page, "#lookup button[type=submit]").await;
    wait_for(
        page,
        "the looked-up task",
        "$text('#lookup-result .state') === 'pending'",
    )
    .await;

    // A reload keeps the selected queue (the fragment) and the prefix.
    page.reload().await.expect("reload");
    wait_for(
        page,
        "payments selected after the reload",
        "$text('#queues tr.selected td.queue') === 'payments' && $text('#pending').includes('p-1')",
    )
    .await;
    assert_eq!(
        eval::<String>(page, "location.pathname + location.hash").await,
        "/prefix/#queue=payments"
    );
    let outside = proxy.outside.lock().expect("lock").clone();
    assert!(
        outside.is_empty(),
        "the page asked for paths outside /prefix/: {outside:?}"
    );
    assert!(proxy.forwarded.load(Ordering::Relaxed) > 10);
    browser.finish(&[]).await;
    drop(serve);
}

/// Leaves the page, then opens `url`: a fresh load even when only the fragment differs.
/// A navigation that times out (CI runs on a loaded machine saw one, and once two in a row)
/// is tried again, three times in all.
async fn open_afresh(page: &Page, url: &str) {
    page.goto("about:blank").await.expect("leave the page");
    for attempt in 1..=3 {
        match page.goto(url).await {
            Ok(_) => return,
            Err(error) if attempt < 3 => {
                eprintln!("opening {url} failed ({error}); trying again");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(error) => panic!("open the dashboard: {error}"),
        }
    }
}

/// Waits for two more refreshes of the page (its `updated` time changes twice).
async fn assert_keeps_refreshing(page: &Page) {
    for _ in 0..2 {
        let before = eval::<String>(page, "$text('#updated')").await;
        wait_for(
            page,
            "another refresh",
            &format!("$text('#updated') !== {before:?} && $text('#updated').startsWith('updated')"),
        )
        .await;
    }
}

/// A reverse proxy on 127.0.0.1 that serves an upstream under `/prefix/`, as
/// `location /prefix/ { proxy_pass http://upstream/; }` of nginx does: it strips the prefix
/// from the path, forwards the request (method, headers but `Host`, body) and copies the
/// answer back; `/prefix` redirects to `/prefix/`; any other path is its own 404 (recorded:
/// a page with absolute URLs asks for those).
struct Proxy {
    /// `http://127.0.0.1:PORT`.
    url: String,
    /// The paths asked for outside the prefix.
    outside: Arc<Mutex<Vec<String>>>,
    /// Requests forwarded upstream.
    forwarded: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let outside = Arc::new(Mutex::new(Vec::new()));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let (upstream, seen, count) = (upstream.to_owned(), outside.clone(), forwarded.clone());
        let app = axum::Router::new().fallback(move |request: Request| {
            let (client, upstream, seen, count) = (
                client.clone(),
                upstream.clone(),
                seen.clone(),
                count.clone(),
            );
            async move {
                let target = request
                    .uri()
                    .path_and_query()
                    .map_or("/", |path| path.as_str())
                    .to_owned();
                match target.strip_prefix("/prefix") {
                    Some(rest) if rest.starts_with('/') => {
                        count.fetch_add(1, Ordering::Relaxed);
                        forward(&client, &format!("{upstream}{rest}"), request).await
                    }
                    Some("") => (
                        StatusCode::MOVED_PERMANENTLY,
                        [(header::LOCATION, "/prefix/")],
                    )
                        .into_response(),
                    _ => {
                        seen.lock().expect("lock").push(target);
                        (StatusCode::NOT_FOUND, "not behind this proxy").into_response()
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            url,
            outside,
            forwarded,
            server,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Sends `request` to `target` and gives back its answer (502 when upstream fails).
async fn forward(client: &reqwest::Client, target: &str, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let hop = [header::HOST, header::CONNECTION, header::CONTENT_LENGTH];
    let mut outgoing = client.request(parts.method, target).body(body);
    for (name, value) in &parts.headers {
        if !hop.contains(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let Ok(answer) = outgoing.send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !hop.contains(name) && name != header::TRANSFER_ENCODING {
            response = response.header(name, value);
        }
    }
    let body = answer.bytes().await.unwrap_or_default();
    response
        .body(axum::body::Body::from(body))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// After a few refreshes: still no prompt beyond the first two (the refused token and the
/// right one), and no cookie.
async fn assert_stays_signed_in(page: &Page) {
    let first = eval::<String>(page, "$text('#updated')").await;
    wait_for(
        page,
        "two more refreshes",
        &format!("$text('#updated') !== {first:?}"),
    )
    .await;
    let second = eval::<String>(page, "$text('#updated')").await;
    wait_for(
        page,
        "another refresh",
        &format!("$text('#updated') !== {second:?}"),
    )
    .await;
    assert!(!eval::<bool>(page, "document.getElementById('token-dialog').open").await);
    assert_eq!(
        eval::<String>(page, "sessionStorage.getItem('asks')").await,
        "2"
    );
    assert_eq!(eval::<String>(page, "document.cookie").await, "");
}

/// A script that gives the text of the recurring schedule `name`'s row.
fn schedule_row_text(name: &str) -> String {
    format!("$text('#recurring tr[data-schedule=\"{name}\"]')")
}

/// Clicks Pause (`pause`) or Resume on `name`'s row, then waits until the row shows the
/// new state and `delayq recurring get` agrees.
async fn pause_from_the_page(env: &Env, page: &Page, name: &str, pause: bool) {
    let (action, state) = if pause {
        ("pause", "true")
    } else {
        ("resume", "false")
    };
    click(
        page,
        &format!("#recurring tr[data-schedule=\"{name}\"] button[data-action=\"{action}\"]"),
    )
    .await;
    wait_for(
        page,
        &format!("{name}'s row to show paused = {state}"),
        &format!("document.querySelector('#recurring tr[data-schedule=\"{name}\"]').dataset.paused === '{state}'"),
    )
    .await;
    let schedule = env.json(&["recurring", "get", name]);
    assert_eq!(schedule["paused"], pause, "the API agrees: {schedule}");
    assert_eq!(schedule["next_ms"].is_null(), pause, "{schedule}");
}

/// Clicks Pause (`pause`) or Resume on queue `name`'s row, then waits until the row shows
/// the new state and `delayq stats --json` agrees.
async fn pause_queue_from_the_page(env: &Env, page: &Page, name: &str, pause: bool) {
    let (action, state) = if pause {
        ("pause", "true")
    } else {
        ("resume", "false")
    };
    click(
        page,
        &format!("#queues tr[data-queue=\"{name}\"] button[data-action=\"{action}\"]"),
    )
    .await;
    wait_for(
        page,
        &format!("queue {name}'s row to show paused = {state}"),
        &format!("document.querySelector('#queues tr[data-queue=\"{name}\"]').dataset.paused === '{state}'"),
    )
    .await;
    let stats = env.json(&["stats", "--json"]);
    assert_eq!(stats[name]["paused"], pause, "the CLI agrees: {stats}");
}

/// A node serving `queue` whose handler waits until the file `go` exists.
fn gated_node(env: &Env, queue: &str, go: &std::path::Path) -> NodeProcess {
    let script = format!(
        "cat > /dev/null; while [ ! -e '{}' ]; do sleep 0.05; done",
        go.display()
    );
    env.spawn_node(
        "gated",
        &[
            "--queue",
            queue,
            "--handler",
            "exec",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
}

/// A node whose handler fails every task of `queues` with "card declined".
fn failing_node(env: &Env, queues: &[&str]) -> NodeProcess {
    let mut args: Vec<&str> = queues.iter().flat_map(|queue| ["--queue", queue]).collect();
    args.extend(["--handler", "exec", "--", "sh", "-c"]);
    args.push("echo 'card declined: insufficient funds' >&2; exit 3");
    env.spawn_node("failing", &args)
}

/// Stops a node gracefully (so what is retried later stays pending).
fn stop(node: &mut NodeProcess) {
    node.terminate();
    assert!(node.wait_exit(WAIT).is_some_and(|status| status.success()));
}
