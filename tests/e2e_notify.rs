//! End-to-end: `delayq node` under a `Type=notify` systemd unit. systemd hands the service a
//! datagram socket in `$NOTIFY_SOCKET`; the node sends `READY=1` once it has joined the cluster
//! (so `systemctl start` returns when the node works, and a unit ordered after it starts then)
//! and `STOPPING=1` when SIGTERM starts its drain. The test plays systemd's part with a real
//! Unix datagram socket.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::Env;

/// Receives one notification, failing after a generous bound.
fn receive(socket: &UnixDatagram, what: &str) -> String {
    let mut buffer = [0u8; 4096];
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set a read timeout");
    let length = socket
        .recv(&mut buffer)
        .unwrap_or_else(|error| panic!("no {what} notification within 30 s: {error}"));
    String::from_utf8_lossy(&buffer[..length]).into_owned()
}

#[test]
fn the_node_tells_systemd_it_is_ready_once_joined_and_when_it_stops() {
    let env = Env::start("queues:\n  q:\n    partitions: 4\n");
    let path = env.dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");

    let mut command = env.command(&["node"]);
    command.env("NOTIFY_SOCKET", &path);
    let mut node = common::NodeProcess::spawn("notified", command);
    let ready = receive(&socket, "READY=1");
    assert!(
        ready.lines().any(|line| line == "READY=1"),
        "the first notification is {ready:?}, not READY=1"
    );
    // Joined means a member of the cluster, as `delayq nodes` shows it.
    env.wait_for_members(1);

    node.terminate();
    let stopping = receive(&socket, "STOPPING=1");
    assert!(
        stopping.lines().any(|line| line == "STOPPING=1"),
        "after SIGTERM the notification is {stopping:?}, not STOPPING=1"
    );
    let status = node
        .wait_exit(Duration::from_secs(60))
        .expect("the node exits after SIGTERM");
    assert!(
        status.success(),
        "the node exited with {status}: {}",
        node.stderr_text()
    );
}

#[test]
fn without_a_notify_socket_the_node_runs_as_before() {
    let env = Env::start("queues:\n  q:\n    partitions: 2\n");
    let mut node = env.spawn_node("plain", &[]);
    env.wait_for_members(1);
    node.terminate();
    let status = node
        .wait_exit(Duration::from_secs(60))
        .expect("the node exits after SIGTERM");
    assert!(
        status.success(),
        "the node exited with {status}: {}",
        node.stderr_text()
    );
    assert!(
        !node.stderr_text().contains("notify systemd"),
        "{}",
        node.stderr_text()
    );
}
