//! Placeholder: the Redis backend is being written.

/// The Redis task store.
#[derive(Debug)]
pub struct RedisStore;

/// Options of the Redis task store.
#[derive(Debug, Clone)]
pub struct RedisStoreOptions;
