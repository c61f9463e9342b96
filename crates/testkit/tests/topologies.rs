//! The harness's cluster, sentinel and TLS setups start as described and their helpers tell
//! the truth.

use std::time::Duration;

use delayq_testkit::{RedisCluster, SentinelSet, TlsRedis};

#[test]
fn cluster_without_replicas_spreads_slots_over_three_masters() {
    let cluster = RedisCluster::start(0);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{:?}", cluster.nodes());
    for port in cluster.ports() {
        assert_ne!(port, 6379);
        // The cluster bus listens on the client port + 10000, which the harness kept free.
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port + 10000)).is_ok(),
            "no cluster bus on {}",
            port + 10000
        );
    }
    let owners: std::collections::HashSet<u16> = ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}"]
        .iter()
        .map(|key| cluster.master_of(key))
        .collect();
    assert!(
        owners.len() >= 2,
        "six hash tags landed on one master: {owners:?}"
    );
    let slot = cluster.keyslot("{a}x");
    assert_eq!(slot, cluster.keyslot("{a}y"), "same hash tag, same slot");
}

#[test]
fn sentinels_see_the_whole_set_and_a_planned_failover_moves_the_master() {
    let set = SentinelSet::start();
    let old = set.master_port();
    assert_eq!(set.role(old).as_deref(), Some("master"));
    assert_eq!(set.sentinel_urls().len(), 3);
    let new = set.failover();
    assert_ne!(new, old);
    assert_eq!(set.role(new).as_deref(), Some("master"));
    assert_eq!(set.role(old).as_deref(), Some("slave"));
}

#[test]
fn tls_server_requires_certificates_and_limits_the_user_to_its_prefix() {
    let server = TlsRedis::start("app");
    let pong: String =
        redis::from_redis_value(server.admin_command(&["PING"]).expect("admin PING"))
            .expect("PONG");
    assert_eq!(pong, "PONG");

    let client = redis::Client::build_with_tls(server.user_url(), server.client_certificates())
        .expect("a TLS client");
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("the limited user logs in over TLS");
    let _: () = redis::cmd("SET")
        .arg("app:k")
        .arg("v")
        .query(&mut connection)
        .expect("a key under the prefix");
    let denied = redis::cmd("SET")
        .arg("other:k")
        .arg("v")
        .query::<()>(&mut connection)
        .expect_err("a key outside the prefix is refused");
    assert_eq!(denied.code(), Some("NOPERM"), "{denied}");
    let denied = redis::cmd("FLUSHALL")
        .query::<()>(&mut connection)
        .expect_err("a command outside the list is refused");
    assert_eq!(denied.code(), Some("NOPERM"), "{denied}");

    // Without a client certificate the handshake fails.
    let bare = redis::Client::build_with_tls(
        server.user_url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(&server.files().ca_file).expect("CA")),
        },
    )
    .expect("a TLS client");
    assert!(bare
        .get_connection_with_timeout(Duration::from_secs(2))
        .is_err());
}
