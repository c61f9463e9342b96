//! Checks a [`CoordinatorConfig`] before anything connects.

use std::time::Duration;

use crate::api::CoordinatorConfig;
use crate::error::{CoordinatorError, CoordinatorResult};

/// Checks that `config` can work: non-zero durations, a heartbeat TTL larger than the period,
/// a non-empty node name and a usable key prefix.
///
/// The error names the cluster.yaml key (`node.heartbeat_ttl`, ...) and the value given.
pub fn validate(config: &CoordinatorConfig) -> CoordinatorResult<()> {
    non_zero("node.heartbeat_period", config.heartbeat_period)?;
    non_zero("node.heartbeat_ttl", config.heartbeat_ttl)?;
    non_zero("node.start_timeout", config.start_timeout)?;
    if config.heartbeat_ttl <= config.heartbeat_period {
        return Err(CoordinatorError::InvalidConfig {
            key: "node.heartbeat_ttl",
            value: format!(
                "{:?} (node.heartbeat_period = {:?})",
                config.heartbeat_ttl, config.heartbeat_period
            ),
            reason: "must be larger than node.heartbeat_period, or every node looks dead between two heartbeats",
        });
    }
    if config.node_name.trim().is_empty() {
        return Err(CoordinatorError::InvalidConfig {
            key: "node.name",
            value: format!("{:?}", config.node_name),
            reason: "must not be empty",
        });
    }
    if config.key_prefix.is_empty() {
        return Err(CoordinatorError::InvalidConfig {
            key: "redis.key_prefix",
            value: "\"\"".to_owned(),
            reason: "must not be empty",
        });
    }
    if config.key_prefix.contains(['{', '}']) {
        return Err(CoordinatorError::InvalidConfig {
            key: "redis.key_prefix",
            value: format!("{:?}", config.key_prefix),
            reason:
                "must not contain '{' or '}' (they would change the keys' Redis Cluster hash tag)",
        });
    }
    Ok(())
}

fn non_zero(key: &'static str, value: Duration) -> CoordinatorResult<()> {
    if value.is_zero() {
        return Err(CoordinatorError::InvalidConfig {
            key,
            value: format!("{value:?}"),
            reason: "must be larger than zero",
        });
    }
    Ok(())
}

/// This machine's host name (`HOSTNAME`, then `/proc/sys/kernel/hostname`, then `/etc/hostname`),
/// or `"unknown"`: the default node name and the `host` of [`crate::NodeInfo`].
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(config: &CoordinatorConfig) -> &'static str {
        match validate(config) {
            Err(CoordinatorError::InvalidConfig { key, .. }) => key,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn the_default_config_is_valid() {
        validate(&CoordinatorConfig::default()).expect("default config");
    }

    #[test]
    fn ttl_not_larger_than_period_names_the_ttl() {
        let config = CoordinatorConfig {
            heartbeat_period: Duration::from_secs(1),
            heartbeat_ttl: Duration::from_secs(1),
            ..Default::default()
        };
        assert_eq!(key_of(&config), "node.heartbeat_ttl");
        let message = validate(&config).expect_err("invalid").to_string();
        assert!(message.contains("node.heartbeat_ttl = 1s"), "{message}");
    }

    #[test]
    fn zero_durations_are_rejected() {
        let zero_period = CoordinatorConfig {
            heartbeat_period: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(key_of(&zero_period), "node.heartbeat_period");
        let zero_ttl = CoordinatorConfig {
            heartbeat_ttl: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(key_of(&zero_ttl), "node.heartbeat_ttl");
        let zero_start = CoordinatorConfig {
            start_timeout: Duration::ZERO,
            ..Default::default()
        };
        assert_eq!(key_of(&zero_start), "node.start_timeout");
    }

    #[test]
    fn empty_names_and_braced_prefixes_are_rejected() {
        let no_name = CoordinatorConfig {
            node_name: "  ".to_owned(),
            ..Default::default()
        };
        assert_eq!(key_of(&no_name), "node.name");
        let no_prefix = CoordinatorConfig {
            key_prefix: String::new(),
            ..Default::default()
        };
        assert_eq!(key_of(&no_prefix), "redis.key_prefix");
        let braced = CoordinatorConfig {
            key_prefix: "a{b}".to_owned(),
            ..Default::default()
        };
        assert_eq!(key_of(&braced), "redis.key_prefix");
    }

    #[test]
    fn host_name_is_never_empty() {
        assert!(!host_name().is_empty());
    }
}
