//! What the PostgreSQL layer's tests share: a pool on a private server.

#![allow(dead_code)]

use std::time::Duration;

use delayq_postgres::{Database, PostgresConfig, RetryPolicy};
use delayq_testkit::PostgresServer;

/// The settings for `server` (the non-superuser login) in `schema`.
pub fn config(server: &PostgresServer, schema: &str) -> PostgresConfig {
    PostgresConfig::new(server.url()).with_schema(schema)
}

/// A pool on `server` with the default retry policy.
pub fn database(server: &PostgresServer) -> Database {
    Database::new(&config(server, "delayq")).expect("valid settings")
}

/// A pool on `server` that tries once.
pub fn database_without_retry(server: &PostgresServer) -> Database {
    database(server).with_retry(RetryPolicy::none())
}

/// A retry policy that gives up after `limit`.
pub fn retry_for(limit: Duration) -> RetryPolicy {
    RetryPolicy {
        max_elapsed: limit,
        ..RetryPolicy::default()
    }
}

/// One value from `sql` on a pooled connection.
pub async fn scalar<T>(database: &Database, sql: &'static str) -> T
where
    T: for<'a> delayq_postgres::tokio_postgres::types::FromSql<'a> + Send + 'static,
{
    database
        .run("test query", move |client| {
            Box::pin(async move { Ok(client.query_one(sql, &[]).await?.get(0)) })
        })
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}
