//! A rolling upgrade: a cluster that mixes this release with the previous one keeps
//! detecting deaths of both kinds. The previous release's membership scripts are kept as
//! fixtures in `tests/fixtures/v0.1.0/` and run as it ran them: each heartbeat refreshes its
//! `hb:<id>` key and checks every member's `hb:<id>` key with EXISTS; it knows nothing of
//! the `deadlines` ZSET.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::scenarios::{PERIOD_MS, SLACK, TTL_MS};
use common::{agree, config, ids, sorted_ids, view, wait_for};
use delayq_coordinator::{Coordinator, NodeId, RedisCoordinator, SystemClock};
use delayq_redis::{ConnectOptions, Topology};
use delayq_testkit::RedisServer;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

const OLD_PRELUDE: &str = include_str!("fixtures/v0.1.0/prelude.lua");
const OLD_HEARTBEAT: &str = include_str!("fixtures/v0.1.0/heartbeat.lua");

/// The previous release's reply: {seconds, micros, epoch, added, removed, registry pairs,
/// stalled}.
type OldReply = (u64, u64, u64, u8, Vec<String>, Vec<String>, u8);

/// What a node of the previous release saw.
#[derive(Debug, Default)]
struct OldView {
    epoch: u64,
    /// The registered ids of its last heartbeat, sorted.
    members: Vec<String>,
    /// Every member its heartbeats removed.
    removed: Vec<String>,
}

/// A node of the previous release, heartbeating with its own script every `PERIOD_MS`.
struct OldNode {
    id: String,
    view: Arc<Mutex<OldView>>,
    task: JoinHandle<()>,
}

impl OldNode {
    async fn start(server: &RedisServer, name: &str) -> OldNode {
        let id = format!("0-old-{name}");
        let mut connection = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let view = Arc::new(Mutex::new(OldView::default()));
        let code = format!("{OLD_PRELUDE}\n{OLD_HEARTBEAT}");
        // The first heartbeat registers it before `start` returns.
        let mut previous_ms = beat(&mut connection, &code, &id, name, 0, &view).await;
        let task = {
            let (id, name, view) = (id.clone(), name.to_owned(), view.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(PERIOD_MS)).await;
                    previous_ms =
                        beat(&mut connection, &code, &id, &name, previous_ms, &view).await;
                }
            })
        };
        OldNode { id, view, task }
    }

    fn node_id(&self) -> NodeId {
        NodeId::from_string(&self.id)
    }

    /// Stops heartbeating, as a `kill -9` would.
    fn crash(&self) {
        self.task.abort();
    }
}

/// One heartbeat of the previous release, checking the members of its last view; returns
/// the server time of the call (ms).
async fn beat(
    connection: &mut redis::aio::MultiplexedConnection,
    code: &str,
    id: &str,
    name: &str,
    previous_ms: u64,
    view: &Mutex<OldView>,
) -> u64 {
    let (others, floor) = {
        let view = view.lock();
        let others: Vec<String> = view
            .members
            .iter()
            .filter(|member| member.as_str() != id)
            .cloned()
            .collect();
        (others, view.epoch)
    };
    let mut keys = vec![
        "t:{cluster}:registry".to_owned(),
        "t:{cluster}:epoch".to_owned(),
        format!("t:{{cluster}}:hb:{id}"),
        "t:{cluster}:stall".to_owned(),
    ];
    keys.extend(
        others
            .iter()
            .map(|other| format!("t:{{cluster}}:hb:{other}")),
    );
    let entry = format!(
        r#"{{"name":"{name}","host":"h","pid":1,"version":"0.1.0","started_ms":0,"last_heartbeat_ms":0}}"#
    );
    let stall_gap = (TTL_MS - PERIOD_MS).max(PERIOD_MS * 3 / 2);
    let mut args = vec![
        id.to_owned(),
        entry,
        TTL_MS.to_string(),
        floor.to_string(),
        "t:{cluster}:events".to_owned(),
        "PUBLISH".to_owned(),
        previous_ms.to_string(),
        stall_gap.to_string(),
    ];
    args.extend(others);
    let reply: OldReply = redis::cmd("EVAL")
        .arg(code)
        .arg(keys.len())
        .arg(&keys)
        .arg(&args)
        .query_async(connection)
        .await
        .expect("the previous release's heartbeat runs");
    let (seconds, micros, epoch, _added, removed, registry, _stalled) = reply;
    let mut members: Vec<String> = registry.iter().step_by(2).cloned().collect();
    members.sort();
    let mut view = view.lock();
    view.epoch = view.epoch.max(epoch);
    view.members = members;
    view.removed.extend(removed);
    seconds * 1_000 + micros / 1_000
}

async fn join(server: &RedisServer, name: &str) -> Arc<dyn Coordinator> {
    RedisCoordinator::join(
        ConnectOptions::new(Topology::standalone(server.url())),
        config(name, PERIOD_MS, TTL_MS),
        Arc::new(SystemClock),
    )
    .await
    .expect("join")
}

/// The ids in `ids`, sorted, as strings.
fn strings(ids: &[NodeId]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_nodes_keep_a_live_old_node_and_detect_its_death() {
    let server = RedisServer::start();
    let old = OldNode::start(&server, "old").await;
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(join(&server, &format!("new-{i}")).await);
    }
    let mut all = sorted_ids(&nodes);
    all.push(old.node_id());
    all.sort();
    wait_for(Duration::from_secs(3), || async { agree(&nodes, &all) })
        .await
        .expect("the new nodes see the old one");
    let epoch = view(nodes[0].as_ref()).epoch;
    // Several TTLs: nobody removes a live node of either release (a bounded wait for
    // something that must not happen).
    for _ in 0..(4 * TTL_MS / 50) {
        assert!(agree(&nodes, &all), "{:?}", view(nodes[0].as_ref()));
        assert_eq!(view(nodes[0].as_ref()).epoch, epoch);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(old.view.lock().members, strings(&all));
    assert!(old.view.lock().removed.is_empty());

    // The old node dies: the new nodes see it within one TTL and one period.
    old.crash();
    let survivors = sorted_ids(&nodes);
    let bound = Duration::from_millis(TTL_MS + PERIOD_MS) + SLACK;
    wait_for(bound, || async { agree(&nodes, &survivors) })
        .await
        .unwrap_or_else(|| panic!("the old node's death not seen within {bound:?}"));
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch + 1);
    // And a new node's death is still seen by the new ones.
    nodes.remove(1).crash();
    let survivors = sorted_ids(&nodes);
    wait_for(bound, || async { agree(&nodes, &survivors) })
        .await
        .unwrap_or_else(|| panic!("the new node's death not seen within {bound:?}"));
    assert_eq!(view(nodes[0].as_ref()).epoch, epoch + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_nodes_detect_the_death_of_a_new_node_and_its_deadline_is_dropped_later() {
    let server = RedisServer::start();
    let old = [
        OldNode::start(&server, "a").await,
        OldNode::start(&server, "b").await,
    ];
    let new = join(&server, "new").await;
    let mut all = vec![new.node_id().clone(), old[0].node_id(), old[1].node_id()];
    all.sort();
    wait_for(Duration::from_secs(3), || async {
        ids(&view(new.as_ref())) == all
            && old
                .iter()
                .all(|node| node.view.lock().members == strings(&all))
    })
    .await
    .expect("old and new nodes see each other");
    let epoch = view(new.as_ref()).epoch;

    // Only old nodes are left to notice: they check the new node's `hb:<id>` key.
    new.crash();
    let dead = new.node_id().to_string();
    let bound = Duration::from_millis(TTL_MS + PERIOD_MS) + SLACK;
    wait_for(bound, || async {
        old.iter()
            .all(|node| !node.view.lock().members.contains(&dead))
    })
    .await
    .unwrap_or_else(|| panic!("the old nodes did not remove the new one within {bound:?}"));
    let removals: usize = old.iter().map(|node| node.view.lock().removed.len()).sum();
    assert_eq!(removals, 1, "removed once between them");

    // The old release left the dead node's deadline behind; a new node drops it without a
    // bump of its own (only its join bumps), and sees the old nodes alive.
    let late = join(&server, "late").await;
    let mut expected = vec![late.node_id().clone(), old[0].node_id(), old[1].node_id()];
    expected.sort();
    wait_for(Duration::from_secs(2), || async {
        ids(&view(late.as_ref())) == expected
    })
    .await
    .expect("the late node sees the old ones");
    tokio::time::sleep(Duration::from_millis(3 * PERIOD_MS)).await;
    let late_view = view(late.as_ref());
    assert_eq!(ids(&late_view), expected);
    assert_eq!(late_view.epoch, epoch + 2, "one removal and one join");
    let deadlines = server
        .command(&["ZRANGE", "t:{cluster}:deadlines", "0", "-1"])
        .expect("ZRANGE");
    let deadlines: Vec<String> = redis::from_redis_value(deadlines).expect("ids");
    assert_eq!(deadlines, [late.node_id().to_string()]);
    for node in &old {
        node.crash();
    }
}
