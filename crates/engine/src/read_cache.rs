//! What `nodes` and `stats` compute per request, bounded and cached (DESIGN.md, "Cost
//! model": bounded by the cluster's size once, not by its square, and cached per membership
//! epoch where it can be).
//!
//! - **Ownership counts** (`nodes`, `delayq nodes`, `GET /v1/nodes`, the dashboard): each
//!   `(queue, partition)`'s owner is computed once over the members, O(members × queues ×
//!   partitions) hashes, and counted per member. The counts are cached keyed by the
//!   membership (epoch and members) and the queue registry as read, so a repeated request
//!   with nothing changed costs the registry reads (nodes and queues) and no hash; a
//!   membership change, or a queue added or deleted, recomputes them on the next request.
//!   Heartbeat ages are never cached: they come from the registry read of each request.
//! - **Queue counts** (`stats`, `GET /v1/queues`, the dashboard, the `/metrics` queue
//!   gauges): one read of every partition of every queue, at most [`STATS_CONCURRENCY`]
//!   partition reads in flight, and at most one such read in flight per scheduler. Callers
//!   that arrive while a read runs wait for it and then share the next one (so N
//!   dashboards cost about one read at a time, not N), and a caller never gets counts read
//!   before it asked, unless it allows an age ([`Scheduler::stats_within`], which `/metrics`
//!   uses with its `queue_stats_ttl`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_coordinator::{owner, Member, Membership, NodeId};
use delayq_storage::{Partition, PartitionStats, QueueName, StorageError};
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::error::{EngineError, EngineResult};
use crate::scheduler::Scheduler;

/// Partition reads of one `stats` in flight at once, over all queues.
pub(crate) const STATS_CONCURRENCY: usize = 16;

/// Counts per queue, as [`Scheduler::stats`] returns them.
pub(crate) type QueueStats = BTreeMap<String, PartitionStats>;

/// The caches one scheduler (and all its clones) shares.
#[derive(Default)]
pub(crate) struct ReadCaches {
    pub(crate) ownership: OwnershipCache,
    pub(crate) stats: StatsCache,
}

/// The partitions one member owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemberOwnership {
    /// Per queue where it owns at least one.
    pub(crate) by_queue: BTreeMap<String, usize>,
    /// In all.
    pub(crate) total: usize,
}

/// Every member's partitions (members that own none included).
pub(crate) type Ownership = HashMap<NodeId, MemberOwnership>;

/// Counts the partitions of `queues` each of `members` owns: one [`owner`] per `(queue,
/// partition)`, so O(members × partitions in all) weights.
pub(crate) fn count_ownership(queues: &[(QueueName, u32)], members: &[Member]) -> Ownership {
    let index: HashMap<&NodeId, usize> = members
        .iter()
        .enumerate()
        .map(|(position, member)| (&member.id, position))
        .collect();
    let mut owned = vec![MemberOwnership::default(); members.len()];
    let mut counts = vec![0usize; members.len()];
    for (queue, partitions) in queues {
        counts.iter_mut().for_each(|count| *count = 0);
        for partition in 0..*partitions {
            if let Some(position) =
                owner(queue.as_str(), partition, members).and_then(|id| index.get(id))
            {
                counts[*position] += 1;
            }
        }
        for (member, &count) in owned.iter_mut().zip(&counts) {
            if count > 0 {
                *member
                    .by_queue
                    .entry(queue.as_str().to_owned())
                    .or_insert(0) += count;
                member.total += count;
            }
        }
    }
    members
        .iter()
        .map(|member| member.id.clone())
        .zip(owned)
        .collect()
}

/// What the ownership counts were computed from.
#[derive(PartialEq, Eq)]
struct OwnershipKey {
    membership: Membership,
    queues: Vec<(QueueName, u32)>,
}

/// The ownership counts of the last membership and queue registry seen.
#[derive(Default)]
pub(crate) struct OwnershipCache {
    /// Held while counting, so concurrent requests after a change count once.
    slot: tokio::sync::Mutex<Option<(OwnershipKey, Arc<Ownership>)>>,
    /// How many times the counts were computed (tests).
    computed: AtomicU64,
}

impl OwnershipCache {
    /// The counts for `membership` and `queues` (the registry as read, in any order):
    /// cached unless either changed.
    pub(crate) async fn get(
        &self,
        membership: Membership,
        mut queues: Vec<(QueueName, u32)>,
    ) -> Arc<Ownership> {
        queues.sort();
        let key = OwnershipKey { membership, queues };
        let mut slot = self.slot.lock().await;
        if let Some((cached, ownership)) = slot.as_ref() {
            if *cached == key {
                return ownership.clone();
            }
        }
        let ownership = Arc::new(count_ownership(&key.queues, &key.membership.members));
        self.computed.fetch_add(1, Ordering::Relaxed);
        *slot = Some((key, ownership.clone()));
        ownership
    }

    /// How many times the counts were computed.
    #[cfg(test)]
    pub(crate) fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }
}

/// The last read of the queue counts.
struct StatsRead {
    /// When it started (after the read before it ended).
    started: Instant,
    /// The counts, or why the read failed.
    outcome: Result<Arc<QueueStats>, String>,
}

/// The queue counts of the last read, and the lock that makes reads one at a time.
#[derive(Default)]
pub(crate) struct StatsCache {
    /// Held during a read: callers queue here and take the read that started after they
    /// asked.
    slot: tokio::sync::Mutex<Option<StatsRead>>,
    /// How many reads ran (tests).
    reads: AtomicU64,
}

impl StatsCache {
    /// The counts of a read that started after `asked`, or at most `max_age` before it;
    /// else runs `read` (one at a time). A failure is shared only with the callers that
    /// waited for that read, never reused for `max_age`.
    async fn get<F, Fut>(&self, max_age: Duration, read: F) -> EngineResult<Arc<QueueStats>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = EngineResult<QueueStats>>,
    {
        let asked = Instant::now();
        let mut slot = self.slot.lock().await;
        if let Some(last) = slot.as_ref() {
            let after = last.started > asked;
            let young = asked.saturating_duration_since(last.started) < max_age;
            match &last.outcome {
                Ok(stats) if after || young => return Ok(stats.clone()),
                Err(message) if after => {
                    return Err(EngineError::Storage(StorageError::Backend {
                        operation: "stats",
                        message: message.clone(),
                    }))
                }
                _ => {}
            }
        }
        let started = Instant::now();
        self.reads.fetch_add(1, Ordering::Relaxed);
        let outcome = read().await.map(Arc::new);
        *slot = Some(StatsRead {
            started,
            outcome: match &outcome {
                Ok(stats) => Ok(stats.clone()),
                Err(error) => Err(error.to_string()),
            },
        });
        outcome
    }

    /// How many reads ran.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Scheduler {
    /// Counts per queue like [`Scheduler::stats`], but a read that started at most
    /// `max_age` ago may answer (`Duration::ZERO`: only a read that started after this
    /// call). Whatever the age, reads of one scheduler run one at a time and callers that
    /// wait for one share the next; `/metrics` uses it with its `queue_stats_ttl`.
    pub async fn stats_within(
        &self,
        max_age: Duration,
    ) -> EngineResult<BTreeMap<String, PartitionStats>> {
        let stats = self.reads.stats.get(max_age, || self.read_stats()).await?;
        Ok((*stats).clone())
    }

    /// Reads every partition of every queue the store knows, [`STATS_CONCURRENCY`] at once.
    async fn read_stats(&self) -> EngineResult<QueueStats> {
        let store = self.store();
        let now = self.now_ms();
        let queues = store.queues().await?;
        let totals: QueueStats = queues
            .iter()
            .map(|(queue, _)| (queue.as_str().to_owned(), PartitionStats::default()))
            .collect();
        let partitions = queues.into_iter().flat_map(|(queue, partitions)| {
            (0..partitions).map(move |index| Partition::new(queue.clone(), index))
        });
        let totals = stream::iter(partitions)
            .map(|partition| {
                let store = store.clone();
                async move {
                    let stats = store.stats(&partition, now).await?;
                    Ok::<_, StorageError>((partition.queue, stats))
                }
            })
            .buffer_unordered(STATS_CONCURRENCY)
            .try_fold(totals, |mut totals, (queue, stats)| async move {
                if let Some(total) = totals.get_mut(queue.as_str()) {
                    *total += stats;
                }
                Ok(totals)
            })
            .await?;
        Ok(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq_coordinator::{owned_partitions, QueueFilter};

    fn members(count: usize) -> Vec<Member> {
        let mut members: Vec<Member> = (0..count)
            .map(|i| Member {
                id: NodeId::from_string(format!("node-{i:03}")),
                queues: if i % 3 == 0 {
                    QueueFilter::only([format!("q{}", i % 5)])
                } else {
                    QueueFilter::All
                },
            })
            .collect();
        members.sort_by(|a, b| a.id.cmp(&b.id));
        members
    }

    #[test]
    fn counts_match_the_per_node_computation() {
        let members = members(12);
        let queues: Vec<(QueueName, u32)> = (0..6)
            .map(|i| (QueueName::new(format!("q{i}")).expect("name"), 8 + i))
            .collect();
        let ownership = count_ownership(&queues, &members);
        assert_eq!(ownership.len(), members.len());
        for member in &members {
            let expected: BTreeMap<String, usize> = queues
                .iter()
                .map(|(queue, partitions)| {
                    let owned = owned_partitions(&member.id, queue.as_str(), *partitions, &members);
                    (queue.as_str().to_owned(), owned.len())
                })
                .filter(|(_, owned)| *owned > 0)
                .collect();
            let got = &ownership[&member.id];
            assert_eq!(got.by_queue, expected, "{:?}", member.id);
            assert_eq!(got.total, expected.values().sum::<usize>());
        }
        let total: usize = ownership.values().map(|owned| owned.total).sum();
        assert_eq!(
            total,
            queues.iter().map(|(_, p)| *p as usize).sum::<usize>()
        );
    }

    #[tokio::test]
    async fn the_cache_follows_the_membership_and_the_registry() {
        let cache = OwnershipCache::default();
        let membership = Membership {
            epoch: 7,
            members: members(4),
        };
        let queues = vec![
            (QueueName::new("b").expect("name"), 4),
            (QueueName::new("a").expect("name"), 4),
        ];
        let first = cache.get(membership.clone(), queues.clone()).await;
        let mut reordered = queues.clone();
        reordered.reverse();
        let again = cache.get(membership.clone(), reordered).await;
        assert!(Arc::ptr_eq(&first, &again), "nothing changed: cached");
        assert_eq!(cache.computed(), 1);

        let mut next = membership.clone();
        next.epoch += 1;
        next.members.pop();
        cache.get(next.clone(), queues.clone()).await;
        assert_eq!(cache.computed(), 2, "a new epoch recomputes");

        let mut more = queues.clone();
        more.push((QueueName::new("c").expect("name"), 2));
        let added = cache.get(next.clone(), more).await;
        assert_eq!(cache.computed(), 3, "a queue added recomputes");
        assert_eq!(added.values().map(|o| o.total).sum::<usize>(), 10);
        let deleted = cache.get(next, queues[..1].to_vec()).await;
        assert_eq!(cache.computed(), 4, "a queue deleted recomputes");
        assert_eq!(deleted.values().map(|o| o.total).sum::<usize>(), 4);
    }

    #[tokio::test]
    async fn stats_callers_share_a_read_that_started_after_they_asked() {
        let cache = Arc::new(StatsCache::default());
        let read = || async { Ok(QueueStats::new()) };
        cache.get(Duration::ZERO, read).await.expect("read");
        cache.get(Duration::ZERO, read).await.expect("read");
        assert_eq!(cache.reads(), 2, "no age allowed: each call reads");
        cache
            .get(Duration::from_secs(60), read)
            .await
            .expect("read");
        assert_eq!(cache.reads(), 2, "a young read answers");

        // Ten callers queue behind a slow read: they share the one read after it.
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let slow = {
            let cache = cache.clone();
            tokio::spawn(async move {
                cache
                    .get(Duration::ZERO, || async move {
                        released.await.ok();
                        Ok(QueueStats::new())
                    })
                    .await
            })
        };
        while cache.reads() < 3 {
            tokio::task::yield_now().await;
        }
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.get(Duration::ZERO, read).await })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        release.send(()).expect("the slow read waits");
        slow.await.expect("join").expect("read");
        for waiter in waiters {
            waiter.await.expect("join").expect("read");
        }
        assert_eq!(cache.reads(), 4, "the waiters shared one read");
    }

    #[tokio::test]
    async fn a_failed_read_is_shared_with_its_waiters_only() {
        let cache = StatsCache::default();
        let failing = || async {
            Err(EngineError::Storage(StorageError::Backend {
                operation: "stats",
                message: "down".to_owned(),
            }))
        };
        assert!(cache.get(Duration::from_secs(60), failing).await.is_err());
        let read = || async { Ok(QueueStats::new()) };
        cache
            .get(Duration::from_secs(60), read)
            .await
            .expect("a failure is not reused for the age");
        assert_eq!(cache.reads(), 2);
    }
}
