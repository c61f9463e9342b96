//! What the sentinels announce about our master: `+failover-state-send-slaveof-noone` (a
//! replica is being promoted: stop using the old master), `+switch-master` (the new
//! master's address, and the old one's, which is not to be used again until re-announced)
//! and `-failover-abort-*` (the promotion was given up: the master the sentinels name, the
//! old one, is used again at once rather than after the failover timeout).

use std::collections::HashSet;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::{Client, ConnectionAddr, ConnectionInfo};
use tokio::time::Instant;

use super::Shared;

/// The channel on which sentinels announce a new master.
const SWITCH_MASTER: &str = "+switch-master";
/// The channel on which a sentinel announces it is promoting a replica: from then on the old
/// master is about to be demoted, and what it acknowledges may be lost.
const PROMOTING: &str = "+failover-state-send-slaveof-noone";
/// The channels on which a sentinel announces that a failover it led was given up (the
/// replica it chose did not report its promotion in time, it lost the election, or it found
/// no replica to promote): the old master stays the master.
const ABORTED: [&str; 3] = [
    "-failover-abort-slave-timeout",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
];

/// The sentinels' announcements about one master.
pub(super) struct Announcements {
    state: Mutex<State>,
    failover_timeout: Duration,
}

#[derive(Default)]
struct State {
    /// A promotion is under way since then (until `+switch-master` or the failover timeout).
    promoting_since: Option<Instant>,
    /// The latest announced master (`host`, `port`).
    announced: Option<(String, u16)>,
    /// Masters announced as replaced (`host:port`).
    replaced: HashSet<String>,
}

impl Announcements {
    pub(super) fn new(failover_timeout: Duration) -> Self {
        Announcements {
            state: Mutex::new(State::default()),
            failover_timeout,
        }
    }

    /// Whether a promotion is under way: no master is to be used until it is announced.
    pub(super) fn promoting(&self) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        match state.promoting_since {
            Some(at) if at.elapsed() < self.failover_timeout => true,
            Some(_) => {
                state.promoting_since = None;
                false
            }
            None => false,
        }
    }

    /// The master the latest `+switch-master` announced.
    pub(super) fn announced_master(&self) -> Option<(String, u16)> {
        self.state
            .lock()
            .ok()
            .and_then(|state| state.announced.clone())
    }

    /// Whether `address` (`host:port`) was announced as a replaced master.
    pub(super) fn is_replaced(&self, address: &str) -> bool {
        self.state
            .lock()
            .is_ok_and(|state| state.replaced.contains(address))
    }

    /// Records one event; returns whether it is news about our master (the master in use is
    /// then to be dropped).
    fn record(&self, channel: &str, payload: &str, name: &str) -> bool {
        let words: Vec<&str> = payload.split(' ').collect();
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        match (channel, words.as_slice()) {
            // `<name> <old ip> <old port> <new ip> <new port>`
            (SWITCH_MASTER, [master, old_ip, old_port, new_ip, new_port]) if *master == name => {
                let Ok(port) = new_port.parse::<u16>() else {
                    return false;
                };
                // Every sentinel announces the same switch as it learns of it: only the
                // first one changes anything.
                let announced = Some(((*new_ip).to_owned(), port));
                let news = state.announced != announced || state.promoting_since.is_some();
                state.replaced.insert(format!("{old_ip}:{old_port}"));
                state.replaced.remove(&format!("{new_ip}:{new_port}"));
                state.announced = announced;
                state.promoting_since = None;
                news
            }
            // `slave <id> <ip> <port> @ <name> <master ip> <master port>`
            (PROMOTING, _) if words.iter().skip_while(|w| **w != "@").nth(1) == Some(&name) => {
                state.promoting_since = Some(Instant::now());
                true
            }
            // `master <name> <ip> <port>`: news only while a promotion was under way.
            (aborted, ["master", master, ..]) if ABORTED.contains(&aborted) && *master == name => {
                state.promoting_since.take().is_some()
            }
            _ => false,
        }
    }
}

/// `template` (login, database, TLS settings) pointed at `host:port`.
pub(super) fn with_address(template: ConnectionInfo, host: String, port: u16) -> ConnectionInfo {
    let addr = match template.addr().clone() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            tls_params,
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    template.set_addr(addr)
}

/// Listens on one sentinel for as long as the connection lives; on an announcement about
/// our master, drops the master in use so that the next command finds the new one.
pub(super) async fn follow_announcements(client: Client, shared: Weak<Shared>) {
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            let channels = [SWITCH_MASTER, PROMOTING, ABORTED[0], ABORTED[1], ABORTED[2]];
            if pubsub.subscribe(&channels).await.is_ok() {
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    let channel = message.get_channel_name().to_owned();
                    let payload: String = message.get_payload().unwrap_or_default();
                    if shared
                        .announcements
                        .record(&channel, &payload, &shared.master_name)
                    {
                        tracing::info!(%channel, %payload, "sentinel announced a failover");
                        shared.forget(None);
                    }
                }
            }
        }
        if shared.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_names_the_new_master_and_retires_the_old_one() {
        let announcements = Announcements::new(Duration::from_secs(10));
        let promoting = "slave 127.0.0.1:2 127.0.0.1 2 @ mymaster 127.0.0.1 1";
        assert!(!announcements.record(PROMOTING, promoting, "other"));
        assert!(announcements.record(PROMOTING, promoting, "mymaster"));
        assert!(announcements.promoting());
        assert!(!announcements.record(SWITCH_MASTER, "other 127.0.0.1 1 127.0.0.1 2", "mymaster"));
        assert!(announcements.record(
            SWITCH_MASTER,
            "mymaster 127.0.0.1 1 127.0.0.1 2",
            "mymaster"
        ));
        assert!(!announcements.promoting());
        assert!(announcements.is_replaced("127.0.0.1:1"));
        assert_eq!(
            announcements.announced_master(),
            Some(("127.0.0.1".to_owned(), 2))
        );
        // Failing back re-admits the old master.
        assert!(announcements.record(
            SWITCH_MASTER,
            "mymaster 127.0.0.1 2 127.0.0.1 1",
            "mymaster"
        ));
        assert!(!announcements.is_replaced("127.0.0.1:1"));
        // The same switch heard from another sentinel is no news.
        assert!(!announcements.record(
            SWITCH_MASTER,
            "mymaster 127.0.0.1 2 127.0.0.1 1",
            "mymaster"
        ));
    }

    #[test]
    fn an_aborted_promotion_lets_the_old_master_be_used_again_at_once() {
        // The soak (tests/e2e_soak.rs) saw every node stand still for the whole failover
        // timeout (10 s) after the sentinels gave a promotion up on a loaded machine.
        let announcements = Announcements::new(Duration::from_secs(10));
        let promoting = "slave 127.0.0.1:2 127.0.0.1 2 @ mymaster 127.0.0.1 1";
        assert!(announcements.record(PROMOTING, promoting, "mymaster"));
        assert!(announcements.promoting());
        let aborted = "master mymaster 127.0.0.1 1";
        assert!(!announcements.record("-failover-abort-slave-timeout", aborted, "other"));
        assert!(announcements.promoting());
        assert!(announcements.record("-failover-abort-slave-timeout", aborted, "mymaster"));
        assert!(!announcements.promoting());
        assert!(!announcements.is_replaced("127.0.0.1:1"));
        // Heard again from another sentinel, or with no promotion under way: no news.
        assert!(!announcements.record("-failover-abort-slave-timeout", aborted, "mymaster"));
        for channel in [
            "-failover-abort-not-elected",
            "-failover-abort-no-good-slave",
        ] {
            assert!(announcements.record(PROMOTING, promoting, "mymaster"));
            assert!(
                announcements.record(channel, aborted, "mymaster"),
                "{channel}"
            );
            assert!(!announcements.promoting(), "{channel}");
        }
    }

    #[test]
    fn a_promotion_stops_counting_after_the_failover_timeout() {
        let announcements = Announcements::new(Duration::ZERO);
        let promoting = "slave 127.0.0.1:2 127.0.0.1 2 @ mymaster 127.0.0.1 1";
        assert!(announcements.record(PROMOTING, promoting, "mymaster"));
        assert!(!announcements.promoting());
    }
}
