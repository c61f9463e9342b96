//! The wake-up mailbox between a coordinator's pub/sub reader and the engine: bounded,
//! coalescing, and never blocking the reader.
//!
//! A wake-up only says "partition P of queue Q may have something due at T, before your next
//! pull". So the mailbox keeps **one entry per `(queue, partition)`**, with the earliest due
//! time sent for it, hands out the most urgent entry first, and holds at most
//! [`WAKEUP_CAPACITY`] entries. When it is full, a wake-up for a new partition either
//! replaces the entry due last (if it is due earlier) or is dropped; both count as dropped
//! in [`WakeupStats`]. A dropped wake-up costs at most one pull period of lateness: the
//! partition's owner re-reads it every `engine.pull_period` anyway (the safety net).
//!
//! Sending takes a short lock and never waits, so a flood of wake-ups (churn, a bug, an
//! attacker with access to Redis) can neither block the reader that also follows the
//! membership, nor grow memory without bound.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::api::Wakeup;

/// The most `(queue, partition)` entries a node's mailbox holds. Enough for every partition
/// of 64 queues of 64 partitions; beyond it the periodic pull covers what is dropped.
pub const WAKEUP_CAPACITY: usize = 4_096;

/// Counters of a wake-up mailbox, for tests and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WakeupStats {
    /// Entries waiting now (at most `capacity`).
    pub pending: usize,
    /// The most entries the mailbox holds.
    pub capacity: usize,
    /// Wake-ups offered to the mailbox.
    pub received: u64,
    /// Wake-ups folded into an entry already waiting for the same partition.
    pub coalesced: u64,
    /// Wake-ups lost because the mailbox was full (left to the periodic pull).
    pub dropped: u64,
    /// Wake-ups handed to the receiver.
    pub delivered: u64,
    /// Payloads rejected on arrival because they were not wake-ups, or named another
    /// partition than the channel they came on (not counted in `received`).
    pub malformed: u64,
    /// The partitions whose wake-up channel this node is subscribed to now (the ones last
    /// given to [`crate::Coordinator::listen`], once their subscription is confirmed).
    pub listening: usize,
}

type Key = (String, u32);

#[derive(Default)]
struct Pending {
    /// The earliest due time per partition.
    due: HashMap<Key, u64>,
    /// The same entries, ordered by due time (then key): the next to hand out is the first.
    order: BTreeSet<(u64, Key)>,
}

struct Mailbox {
    pending: Mutex<Pending>,
    ready: Notify,
    capacity: usize,
    closed: AtomicBool,
    /// Set by the first drop of a streak (logged once), cleared when the mailbox empties.
    overflowing: AtomicBool,
    received: AtomicU64,
    coalesced: AtomicU64,
    dropped: AtomicU64,
    delivered: AtomicU64,
    malformed: AtomicU64,
    listening: AtomicUsize,
}

impl Mailbox {
    fn stats(&self) -> WakeupStats {
        WakeupStats {
            pending: self.pending.lock().due.len(),
            capacity: self.capacity,
            received: self.received.load(Ordering::Relaxed),
            coalesced: self.coalesced.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            listening: self.listening.load(Ordering::Relaxed),
        }
    }
}

/// A new mailbox holding at most `capacity` entries (at least one).
pub(crate) fn wakeup_mailbox(capacity: usize) -> (WakeupSender, WakeupReceiver) {
    let mailbox = Arc::new(Mailbox {
        pending: Mutex::new(Pending::default()),
        ready: Notify::new(),
        capacity: capacity.max(1),
        closed: AtomicBool::new(false),
        overflowing: AtomicBool::new(false),
        received: AtomicU64::new(0),
        coalesced: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        malformed: AtomicU64::new(0),
        listening: AtomicUsize::new(0),
    });
    (
        WakeupSender {
            mailbox: mailbox.clone(),
        },
        WakeupReceiver { mailbox },
    )
}

/// The coordinator's end of the mailbox. Dropping it closes the mailbox.
pub(crate) struct WakeupSender {
    mailbox: Arc<Mailbox>,
}

/// What became of one wake-up offered to the mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    /// A new entry.
    Queued,
    /// Folded into the entry of the same partition.
    Coalesced,
    /// The mailbox was full (the wake-up, or the entry due last, was dropped).
    Dropped,
}

impl WakeupSender {
    /// Offers a wake-up; never waits.
    pub(crate) fn send(&self, wakeup: Wakeup) -> Offered {
        let mailbox = &self.mailbox;
        mailbox.received.fetch_add(1, Ordering::Relaxed);
        let outcome = {
            let mut pending = mailbox.pending.lock();
            let Pending { due, order } = &mut *pending;
            let key = (wakeup.queue, wakeup.partition);
            if let Some(current) = due.get_mut(&key) {
                if wakeup.due_ms < *current {
                    order.remove(&(*current, key.clone()));
                    order.insert((wakeup.due_ms, key));
                    *current = wakeup.due_ms;
                }
                Offered::Coalesced
            } else if due.len() < mailbox.capacity {
                order.insert((wakeup.due_ms, key.clone()));
                due.insert(key, wakeup.due_ms);
                Offered::Queued
            } else {
                // Full: keep the most urgent entries.
                let last = order.last().map(|(due_ms, _)| *due_ms);
                if last.is_some_and(|last| wakeup.due_ms < last) {
                    if let Some((_, evicted)) = order.pop_last() {
                        due.remove(&evicted);
                    }
                    order.insert((wakeup.due_ms, key.clone()));
                    due.insert(key, wakeup.due_ms);
                }
                Offered::Dropped
            }
        };
        match outcome {
            Offered::Queued => mailbox.ready.notify_one(),
            Offered::Coalesced => {
                mailbox.coalesced.fetch_add(1, Ordering::Relaxed);
            }
            Offered::Dropped => {
                let dropped = mailbox.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if !mailbox.overflowing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        capacity = mailbox.capacity,
                        dropped,
                        "wake-up mailbox full: dropping wake-ups until it drains (the periodic pull covers them)"
                    );
                }
            }
        }
        outcome
    }

    /// Counts a payload that was not a wake-up.
    pub(crate) fn reject_malformed(&self) {
        self.mailbox.malformed.fetch_add(1, Ordering::Relaxed);
    }

    /// Records how many partitions' wake-up channels are subscribed now.
    pub(crate) fn set_listening(&self, partitions: usize) {
        self.mailbox.listening.store(partitions, Ordering::Relaxed);
    }

    /// A handle on the counters.
    pub(crate) fn monitor(&self) -> WakeupMonitor {
        WakeupMonitor {
            mailbox: self.mailbox.clone(),
        }
    }
}

impl Drop for WakeupSender {
    fn drop(&mut self) {
        self.mailbox.closed.store(true, Ordering::SeqCst);
        self.mailbox.ready.notify_one();
    }
}

/// Reads the counters of a mailbox whose receiver is elsewhere.
#[derive(Clone)]
pub(crate) struct WakeupMonitor {
    mailbox: Arc<Mailbox>,
}

impl WakeupMonitor {
    pub(crate) fn stats(&self) -> WakeupStats {
        self.mailbox.stats()
    }
}

/// The wake-ups sent to this node (see [`crate::Coordinator::take_wakeups`]): at most one
/// waiting entry per `(queue, partition)`, with the earliest due time sent for it, handed
/// out most urgent first. Bounded; see the module docs of how it coalesces and drops.
pub struct WakeupReceiver {
    mailbox: Arc<Mailbox>,
}

impl std::fmt::Debug for WakeupReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeupReceiver")
            .field("stats", &self.stats())
            .finish()
    }
}

impl WakeupReceiver {
    /// The next wake-up (the waiting entry due first), waiting for one if none is waiting;
    /// `None` once the coordinator stopped listening (left, crashed or dropped) and nothing
    /// is left.
    pub async fn recv(&mut self) -> Option<Wakeup> {
        loop {
            if let Some(wakeup) = self.try_recv() {
                return Some(wakeup);
            }
            if self.mailbox.closed.load(Ordering::SeqCst) {
                // A last entry may have raced with the close.
                return self.try_recv();
            }
            // A notification sent since the check above is kept as a permit: nothing is missed.
            self.mailbox.ready.notified().await;
        }
    }

    /// The waiting entry due first, if any, without waiting.
    pub fn try_recv(&mut self) -> Option<Wakeup> {
        let mailbox = &self.mailbox;
        let mut pending = mailbox.pending.lock();
        let Some((due_ms, key)) = pending.order.pop_first() else {
            mailbox.overflowing.store(false, Ordering::Relaxed);
            return None;
        };
        pending.due.remove(&key);
        drop(pending);
        mailbox.delivered.fetch_add(1, Ordering::Relaxed);
        let (queue, partition) = key;
        Some(Wakeup {
            queue,
            partition,
            due_ms,
        })
    }

    /// How many entries wait now.
    pub fn len(&self) -> usize {
        self.mailbox.pending.lock().due.len()
    }

    /// Whether no entry waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters of this mailbox.
    pub fn stats(&self) -> WakeupStats {
        self.mailbox.stats()
    }
}

/// A wake-up as a pub/sub or NOTIFY payload: `queue \n partition \n due_ms`.
pub(crate) fn encode_wakeup(wakeup: &Wakeup) -> String {
    format!("{}\n{}\n{}", wakeup.queue, wakeup.partition, wakeup.due_ms)
}

/// The longest payload [`encode_wakeup`] writes: a 64-byte queue name, a `u32` and a `u64`.
const MAX_WAKEUP_PAYLOAD: usize = 64 + 1 + 10 + 1 + 20;

/// Reads a payload of [`encode_wakeup`]; `None` if it is not one: too long, not UTF-8, not
/// three lines, a queue name that breaks the naming rule (1..=64 of `[A-Za-z0-9_.-]`), or
/// numbers that do not parse.
pub(crate) fn decode_wakeup(payload: &[u8]) -> Option<Wakeup> {
    if payload.len() > MAX_WAKEUP_PAYLOAD {
        return None;
    }
    let payload = std::str::from_utf8(payload).ok()?;
    let mut parts = payload.split('\n');
    let queue = parts.next()?;
    let partition = parts.next()?.parse().ok()?;
    let due_ms = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !is_queue_name(queue) {
        return None;
    }
    Some(Wakeup {
        queue: queue.to_owned(),
        partition,
        due_ms,
    })
}

/// The queue naming rule of the design (the storage crate checks the same for its keys).
fn is_queue_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakeups_round_trip() {
        let wakeup = Wakeup {
            queue: "order-timeout".to_owned(),
            partition: 17,
            due_ms: 1_700_000_000_123,
        };
        assert_eq!(encode_wakeup(&wakeup), "order-timeout\n17\n1700000000123");
        assert_eq!(
            decode_wakeup(encode_wakeup(&wakeup).as_bytes()),
            Some(wakeup)
        );
        let longest = format!("{}\n{}\n{}", "q".repeat(64), u32::MAX, u64::MAX);
        assert!(decode_wakeup(longest.as_bytes()).is_some());
    }

    #[test]
    fn malformed_wakeups_are_rejected() {
        for payload in [
            "garbage",
            "q\nx\n1",
            "q\n1",
            "q\n1\n2\n3",
            "q\n-1\n2",
            "q\n4294967296\n2",
            "\n1\n2",
            "bad queue\n1\n2",
            "bad\nq\n1\n2",
        ] {
            assert_eq!(decode_wakeup(payload.as_bytes()), None, "{payload:?}");
        }
        let long_name = format!("{}\n1\n2", "q".repeat(65));
        assert_eq!(decode_wakeup(long_name.as_bytes()), None);
        assert_eq!(decode_wakeup(&[0xff, b'\n', b'1', b'\n', b'2']), None);
        assert_eq!(decode_wakeup(&vec![b'q'; 1 << 20]), None);
    }

    fn wakeup(queue: &str, partition: u32, due_ms: u64) -> Wakeup {
        Wakeup {
            queue: queue.to_owned(),
            partition,
            due_ms,
        }
    }

    #[test]
    fn wakeups_for_one_partition_keep_only_the_earliest_due() {
        let (sender, mut receiver) = wakeup_mailbox(8);
        assert_eq!(sender.send(wakeup("q", 1, 500)), Offered::Queued);
        assert_eq!(sender.send(wakeup("q", 1, 300)), Offered::Coalesced);
        assert_eq!(sender.send(wakeup("q", 1, 900)), Offered::Coalesced);
        assert_eq!(sender.send(wakeup("q", 2, 400)), Offered::Queued);
        assert_eq!(receiver.len(), 2);
        assert_eq!(receiver.try_recv(), Some(wakeup("q", 1, 300)));
        assert_eq!(receiver.try_recv(), Some(wakeup("q", 2, 400)));
        assert_eq!(receiver.try_recv(), None);
        let stats = receiver.stats();
        assert_eq!(
            (stats.received, stats.coalesced, stats.delivered),
            (4, 2, 2)
        );
    }

    #[test]
    fn a_full_mailbox_keeps_the_most_urgent_entries_and_counts_the_rest() {
        let (sender, mut receiver) = wakeup_mailbox(3);
        for partition in 0..3 {
            sender.send(wakeup("q", partition, 1_000 + u64::from(partition)));
        }
        // Later than everything waiting: dropped.
        assert_eq!(sender.send(wakeup("q", 9, 5_000)), Offered::Dropped);
        // Earlier than the entry due last: that one makes room.
        assert_eq!(sender.send(wakeup("q", 8, 10)), Offered::Dropped);
        // A partition already waiting is still coalesced when full.
        assert_eq!(sender.send(wakeup("q", 0, 5)), Offered::Coalesced);
        assert_eq!(receiver.len(), 3);
        let order: Vec<(u32, u64)> = std::iter::from_fn(|| receiver.try_recv())
            .map(|w| (w.partition, w.due_ms))
            .collect();
        assert_eq!(order, [(0, 5), (8, 10), (1, 1_001)]);
        assert_eq!(receiver.stats().dropped, 2);
    }

    #[test]
    fn a_flood_never_grows_the_mailbox_past_its_capacity() {
        let (sender, receiver) = wakeup_mailbox(WAKEUP_CAPACITY);
        for n in 0..100_000u64 {
            sender.send(wakeup(&format!("flood-{}", n % 50_000), (n % 7) as u32, n));
            assert!(receiver.len() <= WAKEUP_CAPACITY);
        }
        let stats = receiver.stats();
        assert_eq!(stats.pending, WAKEUP_CAPACITY);
        assert_eq!(
            stats.received,
            stats.pending as u64 + stats.coalesced + stats.dropped
        );
    }

    #[tokio::test]
    async fn recv_waits_for_a_wakeup_and_ends_when_the_sender_is_gone() {
        let (sender, mut receiver) = wakeup_mailbox(4);
        let waiting = tokio::spawn(async move {
            let first = receiver.recv().await;
            let second = receiver.recv().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        sender.send(wakeup("q", 3, 7));
        // What was sent before the close is still handed out.
        drop(sender);
        let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(2), waiting)
            .await
            .expect("recv returns")
            .expect("no panic");
        assert_eq!(first, Some(wakeup("q", 3, 7)));
        assert_eq!(second, None);
    }
}
