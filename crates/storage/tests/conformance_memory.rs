//! The conformance suite against the in-memory backend.

#[macro_use]
mod conformance;

use std::sync::Arc;

use conformance::{Subject, SubjectFuture};
use delayq_storage::{MemoryStore, StoreOptions};

fn memory_store(options: StoreOptions) -> SubjectFuture {
    Box::pin(async move { Subject::new(Arc::new(MemoryStore::new(options)), None) })
}

conformance_suite!(memory_store);
flow_conformance_suite!(memory_store);
