//! Coalescing of concurrent single-item calls into one multi-item script call ("group
//! commit").
//!
//! Most of a small script's cost in Redis is the call itself (EVALSHA dispatch, the script's
//! prelude, the `redis.call` bridge), not its work: an ack measured about 20 µs of Redis time
//! alone and about 4 µs in a batch. So when many callers ack (or schedule) in the same
//! partition at once, their items are sent together: the first caller finds no batch of that
//! key in flight and starts one at once (no waiting for company); whoever arrives while it is
//! in flight joins the next batch, sent as soon as the first returns. Lone callers pay one
//! task hop; busy partitions pay one script call per batch instead of per item.
//!
//! Each batch runs in its own task, so a caller that gives up (its future dropped) does not
//! strand the others; the batch still completes, as a single call would have.
//!
//! The key says which items may share a call: on a Redis Cluster one partition (one slot), on
//! a single master anything of one kind (the scripts take several partitions per call, so a
//! node's acks of all its partitions share one call). A batch holds at most
//! [`MAX_BATCH`] weight (items weigh 1 unless told: a claim weighs its limit) and, for a
//! batcher built with [`Batcher::weighed`], at most that many bytes in all (a single heavier
//! item goes alone): single schedules of large payloads are cut into calls of at most 8 MiB,
//! like the rounds of `schedule_many` (see [`round_len`]).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{StorageError, StorageResult};
use crate::model::Partition;

/// The most weight (items, unless weighed) sent in one batch by default.
pub(crate) const MAX_BATCH: usize = 512;

type Waiting<I, O> = Vec<(I, usize, oneshot::Sender<StorageResult<O>>)>;

/// How many of the items whose sizes `weights` gives, in order, go into the next round: at
/// most `max_items`, and no more than `max_bytes` in all, except that the first item always
/// goes (alone, when it is heavier than `max_bytes`). 0 only when there are no items.
pub(crate) fn round_len(
    weights: impl IntoIterator<Item = usize>,
    max_items: usize,
    max_bytes: usize,
) -> usize {
    fitting_len(
        weights.into_iter().map(|bytes| (1, bytes)),
        max_items,
        max_bytes,
    )
}

/// How many of the `(weight, bytes)` items, in order, fit in at most `max_weight` and
/// `max_bytes` in all; the first item always goes (alone, when it is over either bound). The
/// one rule behind [`round_len`] (items weigh 1) and a batcher's batches.
fn fitting_len(
    items: impl IntoIterator<Item = (usize, usize)>,
    max_weight: usize,
    max_bytes: usize,
) -> usize {
    let (mut taken, mut weight, mut bytes) = (0usize, 0usize, 0usize);
    for (item_weight, item_bytes) in items {
        if taken > 0
            && (weight.saturating_add(item_weight) > max_weight
                || bytes.saturating_add(item_bytes) > max_bytes)
        {
            break;
        }
        taken += 1;
        weight = weight.saturating_add(item_weight);
        bytes = bytes.saturating_add(item_bytes);
    }
    taken
}

/// Items waiting per key (a partition, and whatever else must be equal within one call).
pub(crate) struct Batcher<K, I, O> {
    queues: Arc<Mutex<HashMap<K, Queue<I, O>>>>,
    /// What bounds each of its batches.
    limits: Limits<I>,
}

struct Queue<I, O> {
    waiting: Waiting<I, O>,
}

impl<K, I, O> Clone for Batcher<K, I, O> {
    fn clone(&self) -> Self {
        Batcher {
            queues: Arc::clone(&self.queues),
            limits: self.limits,
        }
    }
}

impl<K, I, O> Default for Batcher<K, I, O> {
    /// Batches bounded by their number of items only.
    fn default() -> Self {
        Batcher::with_max_weight(MAX_BATCH)
    }
}

impl<K, I, O> Batcher<K, I, O> {
    /// A batcher whose batches weigh at most `max_weight` (a heavier item goes alone), with
    /// no byte bound.
    pub(crate) fn with_max_weight(max_weight: usize) -> Self {
        Batcher {
            queues: Arc::new(Mutex::new(HashMap::new())),
            limits: Limits {
                max_weight: max_weight.max(1),
                weigh: |_| 0,
                max_bytes: usize::MAX,
                linger: None,
            },
        }
    }

    /// A batcher of [`MAX_BATCH`] items whose first batch of a key waits `linger` for
    /// company before it is sent: the acks of one claim, whose handlers finish within a
    /// millisecond or so of each other, then share one call instead of the first going
    /// alone and the rest in a second. A lone caller pays `linger`. The PostgreSQL acks use
    /// it (an ack is not on the path of any fire: the task's handler slot is given back
    /// before its ack is sent); the Redis ones do not.
    pub(crate) fn lingering(linger: std::time::Duration) -> Self {
        let mut batcher = Batcher::with_max_weight(MAX_BATCH);
        batcher.limits.linger = Some(linger);
        batcher
    }

    /// Batches of at most [`MAX_BATCH`] weight and at most `max_bytes` by `weigh` (a single
    /// heavier item goes alone).
    pub(crate) fn weighed(max_bytes: usize, weigh: fn(&I) -> usize) -> Self {
        Batcher {
            queues: Arc::new(Mutex::new(HashMap::new())),
            limits: Limits {
                max_weight: MAX_BATCH,
                weigh,
                max_bytes,
                linger: None,
            },
        }
    }
}

impl<K, I, O> Batcher<K, I, O>
where
    K: Hash + Eq + Clone + Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    /// Sends `item` with the other items of `key` that are waiting, through `send`, which gets
    /// the items of one batch and must return one result per item, in order.
    pub(crate) async fn submit<F, Fut>(
        &self,
        operation: &'static str,
        key: K,
        item: I,
        send: F,
    ) -> StorageResult<O>
    where
        F: FnMut(K, Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<StorageResult<O>>> + Send + 'static,
    {
        self.submit_weighted(operation, key, item, 1, send).await
    }

    /// [`submit`](Self::submit) for an item of `weight`.
    pub(crate) async fn submit_weighted<F, Fut>(
        &self,
        operation: &'static str,
        key: K,
        item: I,
        weight: usize,
        send: F,
    ) -> StorageResult<O>
    where
        F: FnMut(K, Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<StorageResult<O>>> + Send + 'static,
    {
        self.submit_lazily(operation, key, item, weight, move || send)
            .await
    }

    /// [`submit_weighted`](Self::submit_weighted) with `send` made by `make_send` only when
    /// this call starts the batches of `key` (most calls join a batch in flight: they need
    /// no `send`, and what it would capture need not be cloned for them).
    pub(crate) async fn submit_lazily<M, F, Fut>(
        &self,
        operation: &'static str,
        key: K,
        item: I,
        weight: usize,
        make_send: M,
    ) -> StorageResult<O>
    where
        M: FnOnce() -> F,
        F: FnMut(K, Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<StorageResult<O>>> + Send + 'static,
    {
        let (sender, receiver) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock();
            match queues.get_mut(&key) {
                // A batch of this key is in flight: join the next one.
                Some(queue) => {
                    queue.waiting.push((item, weight, sender));
                    false
                }
                None => {
                    queues.insert(
                        key.clone(),
                        Queue {
                            waiting: vec![(item, weight, sender)],
                        },
                    );
                    true
                }
            }
        };
        if start {
            tokio::spawn(drain(
                Arc::clone(&self.queues),
                key,
                self.limits,
                make_send(),
            ));
        }
        receiver.await.unwrap_or_else(|_| {
            Err(StorageError::Backend {
                operation,
                message: "the batch carrying this call was lost".to_owned(),
            })
        })
    }
}

/// What bounds one batch: its weight (as each item was submitted) and its bytes (by `weigh`).
/// The first item always goes, alone when it is over either bound.
struct Limits<I> {
    /// The most weight in one batch.
    max_weight: usize,
    /// The size of an item, counted against `max_bytes`.
    weigh: fn(&I) -> usize,
    /// The most bytes (by `weigh`) in one batch.
    max_bytes: usize,
    /// How long a drain waits before its first batch ([`Batcher::lingering`]).
    linger: Option<std::time::Duration>,
}

// Copied into each drain; `derive` would ask `I: Copy` for the `fn(&I)` alone.
impl<I> Clone for Limits<I> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I> Copy for Limits<I> {}

impl<I> Limits<I> {
    /// How many of the first waiting items go into the next batch.
    fn batch_len<S>(&self, waiting: &[(I, usize, S)]) -> usize {
        let items = waiting
            .iter()
            .map(|(item, weight, _)| (*weight, (self.weigh)(item)));
        fitting_len(items, self.max_weight, self.max_bytes)
    }
}

/// Sends the batches of `key` until none is waiting, then removes the key (the next caller
/// starts a new drain). `limits` bound each batch's weight and bytes.
async fn drain<K, I, O, F, Fut>(
    queues: Arc<Mutex<HashMap<K, Queue<I, O>>>>,
    key: K,
    limits: Limits<I>,
    mut send: F,
) where
    K: Hash + Eq + Clone,
    F: FnMut(K, Vec<I>) -> Fut,
    Fut: Future<Output = Vec<StorageResult<O>>>,
{
    // Should this task end early (a panic), the guard removes the key: its waiting callers
    // see their senders dropped (an error) and the next caller starts afresh.
    let mut guard = RemoveOnDrop {
        queues: &queues,
        key: Some(key.clone()),
    };
    if let Some(linger) = limits.linger {
        tokio::time::sleep(linger).await;
    }
    loop {
        let batch: Waiting<I, O> = {
            let mut locked = queues.lock();
            let Some(queue) = locked.get_mut(&key) else {
                guard.key = None;
                return;
            };
            if queue.waiting.is_empty() {
                // Under the same lock that saw it empty: a caller arriving after this starts
                // a new drain instead of joining a queue nobody drains.
                locked.remove(&key);
                guard.key = None;
                return;
            }
            let take = limits.batch_len(&queue.waiting);
            queue.waiting.drain(..take).collect()
        };
        let (items, senders): (Vec<I>, Vec<_>) = batch
            .into_iter()
            .map(|(item, _, sender)| (item, sender))
            .unzip();
        let results = send(key.clone(), items).await;
        for (sender, result) in senders.into_iter().zip(results) {
            let _ = sender.send(result);
        }
    }
}

/// Removes `key` when dropped while still set (the drain ended abnormally).
struct RemoveOnDrop<'a, K: Hash + Eq, I, O> {
    queues: &'a Mutex<HashMap<K, Queue<I, O>>>,
    key: Option<K>,
}

impl<K: Hash + Eq, I, O> Drop for RemoveOnDrop<'_, K, I, O> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.queues.lock().remove(&key);
        }
    }
}

/// The positions of `partitions` grouped by partition, in the order each first appears.
pub(crate) fn by_partition<'a>(
    partitions: impl Iterator<Item = &'a Partition>,
) -> Vec<(&'a Partition, Vec<usize>)> {
    let mut groups: Vec<(&Partition, Vec<usize>)> = Vec::new();
    let mut group_of: HashMap<&Partition, usize> = HashMap::new();
    for (index, partition) in partitions.enumerate() {
        let group = *group_of.entry(partition).or_insert_with(|| {
            groups.push((partition, Vec::new()));
            groups.len() - 1
        });
        groups[group].1.push(index);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_result() {
        let batcher: Batcher<u32, u64, u64> = Batcher::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let callers = (0..200u64).map(|n| {
            let batcher = batcher.clone();
            let calls = Arc::clone(&calls);
            tokio::spawn(async move {
                batcher
                    .submit("test", 7, n, move |key, items| {
                        let calls = Arc::clone(&calls);
                        async move {
                            calls.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            items
                                .into_iter()
                                .map(|n| Ok(n * 10 + u64::from(key)))
                                .collect()
                        }
                    })
                    .await
            })
        });
        for (n, caller) in futures::future::join_all(callers)
            .await
            .into_iter()
            .enumerate()
        {
            assert_eq!(
                caller.expect("no panic").expect("result"),
                n as u64 * 10 + 7
            );
        }
        let calls = calls.load(Ordering::Relaxed);
        assert!(calls < 200, "200 concurrent items took {calls} calls");
        assert!(batcher.queues.lock().is_empty(), "drained keys are removed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_arriving_as_a_drain_ends_are_never_stranded() {
        let batcher: Batcher<u32, u64, u64> = Batcher::default();
        for round in 0..2_000u64 {
            let callers = (0..3u64).map(|n| {
                let batcher = batcher.clone();
                tokio::spawn(async move {
                    batcher
                        .submit("test", 1, round * 3 + n, |_, items| async move {
                            items.into_iter().map(Ok).collect()
                        })
                        .await
                })
            });
            for (n, caller) in futures::future::join_all(callers)
                .await
                .into_iter()
                .enumerate()
            {
                assert_eq!(
                    caller.expect("no panic").expect("result"),
                    round * 3 + n as u64
                );
            }
        }
    }

    /// Two items 20 ms apart, the second sent while the first's call would be in flight:
    /// without a linger the first goes alone (two calls); with one, they share the first.
    async fn calls_for_two_items_apart(batcher: Batcher<u32, u64, u64>) -> usize {
        let calls = Arc::new(AtomicUsize::new(0));
        let submit = |n: u64| {
            let (batcher, calls) = (batcher.clone(), Arc::clone(&calls));
            tokio::spawn(async move {
                batcher
                    .submit("test", 1, n, move |_, items| {
                        let calls = Arc::clone(&calls);
                        async move {
                            calls.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            items.into_iter().map(Ok).collect()
                        }
                    })
                    .await
            })
        };
        let first = submit(1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = submit(2);
        assert_eq!(first.await.expect("no panic").expect("result"), 1);
        assert_eq!(second.await.expect("no panic").expect("result"), 2);
        calls.load(Ordering::Relaxed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lingering_batcher_sends_items_arriving_within_its_linger_together() {
        assert_eq!(calls_for_two_items_apart(Batcher::default()).await, 2);
        let lingering = Batcher::lingering(Duration::from_millis(500));
        assert_eq!(calls_for_two_items_apart(lingering).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_never_weighs_more_than_its_limit_but_a_heavy_item_goes_alone() {
        let batcher: Batcher<u32, usize, usize> = Batcher::with_max_weight(10);
        let heaviest = Arc::new(AtomicUsize::new(0));
        let callers = [3usize, 4, 5, 2, 25, 1, 6, 4].map(|weight| {
            let (batcher, heaviest) = (batcher.clone(), Arc::clone(&heaviest));
            tokio::spawn(async move {
                batcher
                    .submit_weighted("test", 1, weight, weight, move |_, items| {
                        let heaviest = Arc::clone(&heaviest);
                        async move {
                            let total: usize = items.iter().sum();
                            assert!(total <= 10 || items.len() == 1, "{items:?}");
                            heaviest.fetch_max(total, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            items.into_iter().map(Ok).collect()
                        }
                    })
                    .await
            })
        });
        for (caller, weight) in futures::future::join_all(callers)
            .await
            .into_iter()
            .zip([3usize, 4, 5, 2, 25, 1, 6, 4])
        {
            assert_eq!(caller.expect("no panic").expect("result"), weight);
        }
        assert_eq!(
            heaviest.load(Ordering::Relaxed),
            25,
            "the heavy item went alone"
        );
    }

    #[test]
    fn a_round_stops_at_the_item_or_byte_cap_but_always_takes_one() {
        assert_eq!(round_len([], 10, 100), 0);
        assert_eq!(round_len([1; 20], 10, 100), 10, "the item cap");
        assert_eq!(round_len([40, 40, 40], 10, 100), 2, "the byte cap");
        assert_eq!(round_len([50, 50, 1], 10, 100), 2, "exactly the cap fits");
        assert_eq!(round_len([500, 1], 10, 100), 1, "a heavier item goes alone");
        assert_eq!(
            round_len([1, 500], 10, 100),
            1,
            "and is not joined to a round"
        );
        assert_eq!(
            round_len([usize::MAX, 1], 10, usize::MAX),
            2,
            "no byte cap: the sizes saturate instead of overflowing"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_large_items_is_sent_in_batches_under_the_byte_cap() {
        const CAP: usize = 1_000;
        let batcher: Batcher<u32, Vec<u8>, usize> = Batcher::weighed(CAP, Vec::len);
        let batches = Arc::new(Mutex::new(Vec::new()));
        // 60 items of 300 bytes: at most 3 (900 bytes) per batch, plus one of 2,000 bytes
        // that goes alone.
        let sizes = (0..60).map(|_| 300).chain([2_000]);
        let callers = sizes.enumerate().map(|(n, size)| {
            let batcher = batcher.clone();
            let batches = Arc::clone(&batches);
            tokio::spawn(async move {
                let result = batcher
                    .submit("test", 7, vec![0u8; size], move |_, items| {
                        let batches = Arc::clone(&batches);
                        async move {
                            batches
                                .lock()
                                .push(items.iter().map(Vec::len).collect::<Vec<_>>());
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            items.iter().map(|item| Ok(item.len())).collect()
                        }
                    })
                    .await;
                (n, size, result)
            })
        });
        for caller in futures::future::join_all(callers).await {
            let (n, size, result) = caller.expect("no panic");
            assert_eq!(result.expect("result"), size, "item {n}");
        }
        let batches = batches.lock().clone();
        assert_eq!(
            batches.iter().map(Vec::len).sum::<usize>(),
            61,
            "every item sent once"
        );
        for batch in &batches {
            let bytes: usize = batch.iter().sum();
            assert!(
                bytes <= CAP || batch.len() == 1,
                "a batch of {bytes} bytes over the {CAP}-byte cap: {batch:?}"
            );
        }
        assert!(
            batches.iter().any(|batch| batch.len() > 1),
            "items that waited together were still batched: {batches:?}"
        );
    }

    #[tokio::test]
    async fn a_short_result_fails_the_items_left_without_one() {
        let batcher: Batcher<u32, u64, u64> = Batcher::default();
        let result = batcher
            .submit("test", 1, 5, |_, _| async { Vec::new() })
            .await;
        assert!(
            matches!(result, Err(StorageError::Backend { .. })),
            "{result:?}"
        );
    }
}
