//! The conformance suite against the Redis backend: each case gets its own private
//! `redis-server` (started by `delayq-testkit`) and a key prefix of its own.

#[macro_use]
mod conformance;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use conformance::{Subject, SubjectFuture};
use delayq_storage::{RedisStore, RedisStoreOptions, StoreOptions};
use delayq_testkit::RedisServer;

fn redis_store(options: StoreOptions) -> SubjectFuture {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    Box::pin(async move {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("start redis-server");
        let key_prefix = format!(
            "conformance-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let store = RedisStore::connect(RedisStoreOptions {
            key_prefix,
            store: options,
            ..RedisStoreOptions::standalone(server.url())
        })
        .await
        .unwrap_or_else(|error| panic!("connect to {}: {error}\n{}", server.url(), server.log()));
        Subject::new(Arc::new(store), Some(Box::new(server)))
    })
}

conformance_suite!(redis_store);
flow_conformance_suite!(redis_store);
