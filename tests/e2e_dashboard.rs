//! End-to-end: the dashboard in a real headless Chromium (Debian's `chromium`), against a
//! real redis-server and real `delayq` processes, at laptop size (1280x800).
//!
//! - Served by a `delayq node --listen`: it shows the queues (with the node's lateness),
//!   the node, upcoming tasks and dead letters; a look-up by id works; a task scheduled
//!   after the page loaded appears without a reload; Retry and Purge (through the page's
//!   confirmation) act on one dead letter; the recurring schedules are listed with their
//!   cadence, next tick and counts, and Pause / Resume act on one (the API agrees); Pause
//!   on a queue's row shows it paused (and `delayq stats --json` agrees), Resume undoes it; a
//!   screenshot goes to `target/dashboard.png`.
//! - Served by `delayq serve` with a token: the page asks for the token once (again only
//!   after a refused one), sends it as a header (no cookie), lists a node that joined after
//!   it started, retries and purges all the dead letters of a queue, and pauses a recurring
//!   schedule and a queue (the buttons send the token too).
//!
//! Neither page may log a console error. Without Chromium both tests print one SKIPPED line
//! (past the test harness's output capture) and pass.

mod common;
mod e2e_http_support;

use chromiumoxide::page::Page;
use common::{logged_http_url, wait_for_dead, wait_until, Env, NodeProcess};
use e2e_http_support::{
    chromium, click, eval, fill, screenshot_path, wait_for, wait_for_text, Chromium, Serve, WAIT,
};

/// One browser at a time: the machine running the suite may be small.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_a_node_shows_the_cluster_and_acts_on_dead_letters() {
    let Some(chromium) = chromium() else { return };
    let env = Env::start("queue_defaults:\n  max_attempts: 1\n  partitions: 8\n");
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
        "$text('#queues tr[data-queue=\"orders\"] td:nth-child(7)').includes('ms')",
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

    browser.finish(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_of_serve_asks_for_the_token_once_and_retries_and_purges_all() {
    let Some(chromium) = chromium() else { return };
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
