//! Connecting to Redis at start: retries with backoff until `start_timeout`, one log line per
//! failed attempt, then a clear [`CoordinatorError::Unreachable`].

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, Client};

use crate::api::CoordinatorConfig;
use crate::error::{CoordinatorError, CoordinatorResult};
use crate::tasks::Backoff;

/// How long one connection attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// A client and a self-reconnecting connection to a Redis that answered PING.
pub(crate) struct Connected {
    pub(crate) client: Client,
    pub(crate) connection: ConnectionManager,
}

/// `url` with the password (if any) replaced by `***`, for logs and errors.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |at| scheme_end + at);
    let Some(at) = url[scheme_end..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &url[scheme_end..scheme_end + at];
    let user = userinfo.split(':').next().unwrap_or_default();
    let redacted = if userinfo.contains(':') {
        format!("{user}:***")
    } else {
        "***".to_owned()
    };
    format!(
        "{}{}{}",
        &url[..scheme_end],
        redacted,
        &url[scheme_end + at..]
    )
}

/// Opens a client for `url` (a bad URL is a config error naming `redis.url`).
pub(crate) fn open_client(url: &str) -> CoordinatorResult<Client> {
    Client::open(url).map_err(|error| CoordinatorError::InvalidConfig {
        key: "redis.url",
        value: format!("{} ({error})", redact_url(url)),
        reason: "not a usable Redis URL",
    })
}

/// Connects, retrying until `config.start_timeout` runs out.
pub(crate) async fn connect(url: &str, config: &CoordinatorConfig) -> CoordinatorResult<Connected> {
    let client = open_client(url)?;
    let redacted = redact_url(url);
    let started = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let remaining = config.start_timeout.saturating_sub(started.elapsed());
        let error = match tokio::time::timeout(
            remaining.min(ATTEMPT_TIMEOUT),
            probe(&client, remaining.min(ATTEMPT_TIMEOUT)),
        )
        .await
        {
            Ok(Ok(())) => break,
            Ok(Err(error)) if error.kind() == redis::ErrorKind::AuthenticationFailed => {
                // Retrying a wrong password only hides the cause.
                return Err(CoordinatorError::Backend {
                    operation: "connect",
                    message: format!("{redacted}: {error}"),
                });
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "connection attempt timed out".to_owned(),
        };
        let remaining = config.start_timeout.saturating_sub(started.elapsed());
        tracing::warn!(
            url = %redacted,
            attempt,
            remaining_ms = remaining.as_millis() as u64,
            %error,
            "Redis unreachable; retrying"
        );
        if remaining.is_zero() {
            return Err(CoordinatorError::Unreachable {
                url: redacted,
                waited_ms: started.elapsed().as_millis() as u64,
                message: error,
            });
        }
        tokio::time::sleep(backoff.next_delay().min(remaining)).await;
    }
    let connection = ConnectionManager::new_with_config(client.clone(), manager_config(config))
        .await
        .map_err(|error| CoordinatorError::Unreachable {
            url: redacted.clone(),
            waited_ms: started.elapsed().as_millis() as u64,
            message: error.to_string(),
        })?;
    Ok(Connected { client, connection })
}

/// One attempt: a connection that answers PING.
async fn probe(client: &Client, timeout: Duration) -> redis::RedisResult<()> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    redis::cmd("PING")
        .query_async::<String>(&mut connection)
        .await
        .map(|_| ())
}

/// Reconnection in the background stays short: the heartbeat retries every period anyway.
fn manager_config(config: &CoordinatorConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(config.heartbeat_period)
        .set_connection_timeout(Some(ATTEMPT_TIMEOUT))
        .set_response_timeout(Some(operation_timeout(config)))
}

/// How long one coordinator round trip may take before it counts as failed.
pub(crate) fn operation_timeout(config: &CoordinatorConfig) -> Duration {
    config.heartbeat_ttl.max(Duration::from_millis(500))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_the_logs() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(
            redact_url("rediss://:secret@host/1"),
            "rediss://:***@host/1"
        );
        assert_eq!(redact_url("redis://secret@host"), "redis://***@host");
        assert_eq!(redact_url("redis://127.0.0.1:1/0"), "redis://127.0.0.1:1/0");
    }
}
