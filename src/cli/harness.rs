//! What `delayq bench` and `delayq demo` share: the boxed error they return, the lateness
//! histogram, poison-tolerant locking, run-unique key prefixes and their clean-up, and the
//! redaction of passwords in Redis URLs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use delayq_storage::{Partition, TaskStore};
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use rand::Rng;

/// The error `demo` and `bench` return: its text is the one line the command prints.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest lateness a histogram tracks (larger values count as this): one day, in ms.
pub(crate) const HISTOGRAM_MAX_MS: u64 = 86_400_000;

/// A histogram of milliseconds (0 to a day) with 3 significant figures. Fixed bounds, because
/// `saturating_record` on an auto-resizing histogram clamps to its *current* (tiny) range.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_MS, 3).expect("constant bounds are valid")
}

/// Locks a mutex, ignoring poisoning (a panicking holder leaves the counts usable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<base>-<8 hex digits>`: a key prefix no other run uses.
pub(crate) fn unique_prefix(base: &str) -> String {
    format!("{base}-{:08x}", rand::rng().random::<u32>())
}

/// A time after every due time and lease of a run (2^52 ms, exact as a Lua number).
pub(crate) const END_OF_TIME_MS: u64 = 1 << 52;

/// Removes the tasks of `queues` from the store after a run (every node is shut down): pending
/// and in-flight tasks are cancelled, dead letters purged, completion records pruned. What
/// the store API cannot remove stays: the queue registry entry and the cluster's epoch key
/// (a few small keys under the run's unique prefix).
pub(crate) async fn remove_run_data(
    store: Arc<dyn TaskStore>,
    queues: &[&str],
) -> Result<(), BoxError> {
    let known: BTreeMap<String, u32> = store
        .queues()
        .await?
        .into_iter()
        .map(|(queue, partitions)| (queue.as_str().to_owned(), partitions))
        .collect();
    for (queue, partitions) in known
        .into_iter()
        .filter(|(queue, _)| queues.contains(&queue.as_str()))
    {
        let name = delayq_storage::QueueName::new(&queue)?;
        for index in 0..partitions {
            let partition = Partition::new(name.clone(), index);
            // No node runs any more: every lease can be ended, so in-flight tasks become
            // pending and the cancels below take them too.
            while !store
                .requeue_expired(&partition, END_OF_TIME_MS, 10_000)
                .await?
                .is_empty()
            {}
            loop {
                let ids = store
                    .peek_window(&partition, 0, END_OF_TIME_MS, 10_000)
                    .await?;
                if ids.is_empty() {
                    break;
                }
                let cancels: Vec<_> = stream::iter(ids)
                    .map(|(id, _)| {
                        let store = store.clone();
                        let partition = partition.clone();
                        async move { store.cancel(&partition, &id).await }
                    })
                    .buffer_unordered(256)
                    .collect()
                    .await;
                for cancel in cancels {
                    cancel?;
                }
            }
            store.purge_dead(&partition, None).await?;
            while store.prune_done(&partition, END_OF_TIME_MS, 10_000).await? > 0 {}
        }
    }
    Ok(())
}

/// `url` without the credentials of a `user:password@` part.
pub(crate) fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_owned(),
    }
}
