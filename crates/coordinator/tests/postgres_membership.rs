//! Membership on a real PostgreSQL server: the shared behaviours, plus what only the database
//! can do wrong (a restart, a killed LISTEN connection, what an idle cluster costs it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::scenarios::{self, PERIOD_MS, TTL_MS};
use common::{agree, config, join_agreed, view, wait_for, TestCluster};
use delayq_coordinator::{owner, Coordinator, PostgresCoordinator, SystemClock, Wakeup};
use delayq_postgres::{Database, Migrator, PostgresConfig};
use delayq_testkit::PostgresServer;

struct Postgres {
    server: PostgresServer,
    db: Database,
}

impl Postgres {
    async fn start() -> Self {
        let server = PostgresServer::start();
        let db = Database::new(&PostgresConfig::new(server.url())).expect("pool");
        Migrator::new(&db).apply().await.expect("migrate");
        Postgres { server, db }
    }
}

#[async_trait]
impl TestCluster for Postgres {
    async fn join(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        PostgresCoordinator::join(
            self.db.clone(),
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("join")
    }

    async fn observe(&self, name: &str, period_ms: u64, ttl_ms: u64) -> Arc<dyn Coordinator> {
        PostgresCoordinator::observe(
            self.db.clone(),
            config(name, period_ms, ttl_ms),
            Arc::new(SystemClock),
        )
        .await
        .expect("observe")
    }

    fn wakeups_exclusive(&self) -> bool {
        false
    }
}

/// One test at a time: each starts its own server, and a 100 ms heartbeat on a 2-core
/// machine running a dozen servers at once misses its TTL.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

macro_rules! postgres_scenarios {
    ($($scenario:ident,)*) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                let _serial = SERIAL.lock().await;
                let postgres = Postgres::start().await;
                scenarios::$scenario(&postgres).await;
            }
        )*
    };
}

postgres_scenarios!(
    five_nodes_agree_on_sorted_members_and_epoch_within_one_period,
    a_crashed_node_is_seen_dead_within_ttl_plus_period_with_one_epoch_bump,
    two_crashes_at_once_lose_no_survivor,
    a_graceful_leave_is_seen_at_once,
    wakeups_reach_the_listeners_of_their_partition,
    a_wakeup_nobody_listens_to_goes_to_the_partition_owner,
    an_observer_follows_the_membership_without_registering,
    node_info_is_registered_for_delayq_nodes,
);

#[tokio::test]
async fn the_cluster_clock_is_the_database_clock() {
    let _serial = SERIAL.lock().await;
    let postgres = Postgres::start().await;
    let node = postgres.join("clock", PERIOD_MS, TTL_MS).await;
    let clock = node.clock();
    assert!(clock.is_synchronized());
    let server_ms: i64 = postgres
        .server
        .psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .expect("psql")
        .trim()
        .parse()
        .expect("a number");
    // psql takes a while to start; the database clock read through it lies within that.
    let ours = clock.now_ms() as i64;
    assert!((ours - server_ms).abs() < 2_000, "{ours} vs {server_ms}");
    node.leave().await.expect("leave");
}

#[tokio::test]
async fn nodes_stay_members_through_a_database_restart() {
    let _serial = SERIAL.lock().await;
    let mut postgres = Postgres::start().await;
    let (nodes, all) = join_agreed(&postgres, 3, PERIOD_MS, 2_000).await;
    let before = view(nodes[0].as_ref()).epoch;
    postgres.server.restart();
    // The rows survived (a restart is not a wipe): after it, everybody beats again and nobody
    // was removed, however long the restart took (a long gap sets the stall marker).
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS)).await;
    let converged = wait_for(Duration::from_secs(15), || async {
        agree(&nodes, &all) && {
            let registered = nodes[0].nodes().await.map(|n| n.len()).unwrap_or(0);
            registered == 3
        }
    })
    .await;
    let views: Vec<_> = nodes.iter().map(|n| view(n.as_ref())).collect();
    assert!(converged.is_some(), "after the restart: {views:?}");
    assert_eq!(views[0].epoch, before, "nobody left or joined");
    for node in nodes {
        node.leave().await.expect("leave");
    }
}

#[tokio::test]
async fn a_killed_listen_connection_comes_back_with_a_wakeup_due_now_per_partition() {
    let _serial = SERIAL.lock().await;
    let postgres = Postgres::start().await;
    let (nodes, _) = join_agreed(&postgres, 2, PERIOD_MS, 10_000).await;
    let membership = view(nodes[0].as_ref());
    let mine: Vec<(String, u32)> = (0..8)
        .filter(|&p| owner("orders", p, &membership.members) == Some(nodes[0].node_id()))
        .map(|p| ("orders".to_owned(), p))
        .collect();
    assert!(!mine.is_empty());
    let mut wakeups = nodes[0].take_wakeups().expect("a member's wake-ups");
    nodes[0].listen(mine.clone());
    postgres
        .server
        .psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'delayq-listener'",
        )
        .expect("terminate the listeners");
    let mut resumed = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while resumed.len() < mine.len() {
        let wakeup = tokio::time::timeout_at(deadline, wakeups.recv())
            .await
            .expect("a wake-up due now per listened partition after the reconnect")
            .expect("open");
        resumed.insert((wakeup.queue, wakeup.partition));
    }
    assert_eq!(resumed.into_iter().collect::<Vec<_>>(), mine);
    // And wake-ups flow again on the new connection.
    let (queue, partition) = mine[0].clone();
    let sent = Wakeup {
        queue,
        partition,
        due_ms: 42,
    };
    let mut received = false;
    for _ in 0..50 {
        nodes[1].wake(sent.clone()).await.expect("wake");
        tokio::time::sleep(Duration::from_millis(100)).await;
        if std::iter::from_fn(|| wakeups.try_recv()).any(|w| w.due_ms == 42) {
            received = true;
            break;
        }
    }
    assert!(received, "no wake-up after the reconnect");
}

#[tokio::test]
async fn an_idle_cluster_costs_one_statement_per_node_per_period() {
    let _serial = SERIAL.lock().await;
    let postgres = Postgres::start().await;
    assert!(postgres.server.has_pg_stat_statements());
    let (nodes, _) = join_agreed(&postgres, 3, PERIOD_MS, TTL_MS).await;
    let calls = |server: &PostgresServer| -> f64 {
        server
            .psql(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements \
                 WHERE query NOT ILIKE '%pg_stat_statements%'",
            )
            .expect("psql")
            .trim()
            .parse()
            .expect("a number")
    };
    let before = calls(&postgres.server);
    let periods = 10;
    tokio::time::sleep(Duration::from_millis(periods * PERIOD_MS)).await;
    let spent = calls(&postgres.server) - before;
    // 3 nodes × 10 periods = 30 heartbeats; the psql reads add one each. With 8 members the
    // same (a heartbeat reads the index's passed deadlines only).
    let per_node_period = spent / (3.0 * periods as f64);
    assert!(
        per_node_period <= 1.5,
        "{spent} statements in {periods} periods of 3 nodes"
    );
    for node in nodes {
        node.leave().await.expect("leave");
    }
}
