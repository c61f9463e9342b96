//! Placeholder: the Redis coordinator is being written.

/// A coordinator on Redis.
#[derive(Debug)]
pub struct RedisCoordinator;
