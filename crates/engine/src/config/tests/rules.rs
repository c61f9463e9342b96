//! The validation rules and the retry backoff.

use std::time::Duration;

use super::*;

#[test]
fn ttl_not_above_period_is_rejected_at_its_line() {
    let error = parse_err("node:\n  heartbeat_period: 2s\n  heartbeat_ttl: 2s\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, line: Some(3), .. } if key == "node.heartbeat_ttl"),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("node.heartbeat_period (2s)"),
        "{error}"
    );
}

#[test]
fn zero_partitions_are_rejected_at_their_line() {
    let error = parse_err("queues:\n  q:\n    partitions: 0\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, value, line: Some(3), .. }
            if key == "queues.q.partitions" && value == "0"),
        "{error:?}"
    );
    // A listed queue inheriting nothing bad is fine; an inherited bad value points at the
    // section that wrote it.
    let error = parse_err("queue_defaults:\n  partitions: 70000\nqueues:\n  q: {}\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, line: Some(2), .. } if key == "queue_defaults.partitions"),
        "{error:?}"
    );
}

#[test]
fn invalid_queue_names_are_rejected_with_their_line() {
    for name in ["bad:name", "\"\"", "has space", &"x".repeat(65)] {
        let text = format!("queues:\n  ok: {{}}\n  {name}:\n    timeout: 1s\n");
        match parse_err(&text) {
            ConfigError::InvalidQueueName { line, .. } => assert_eq!(line, Some(3), "{name}"),
            other => panic!("{name}: expected InvalidQueueName, got {other:?}"),
        }
    }
    let message = parse_err("queues:\n  a{b}:\n").to_string();
    assert!(
        message.starts_with("invalid queue name \"a{b}\" under `queues` at line 2"),
        "{message}"
    );
}

/// Spoils one setting of a valid configuration.
type Spoil = fn(&mut Config);

#[test]
fn validate_checks_the_rules() {
    let cases: Vec<(&str, Spoil)> = vec![
        ("redis.url", |c| c.redis.url = "http://x".into()),
        ("redis.key_prefix", |c| c.redis.key_prefix = "a{b}".into()),
        ("redis.key_prefix", |c| c.redis.key_prefix.clear()),
        ("node.name", |c| c.node.name = "  ".into()),
        ("node.heartbeat_period", |c| {
            c.node.heartbeat_period = Duration::ZERO
        }),
        ("node.heartbeat_ttl", |c| c.node.heartbeat_ttl = millis(500)),
        ("node.max_running", |c| c.node.max_running = 0),
        ("node.max_running", |c| c.node.max_running = MAX_RUNNING + 1),
        ("engine.pull_period", |c| {
            c.engine.pull_period = Duration::ZERO
        }),
        ("engine.prefetch_window", |c| {
            c.engine.prefetch_window = millis(10)
        }),
        ("engine.idle_pull_period", |c| {
            c.engine.idle_pull_period = millis(500)
        }),
        ("engine.claim_batch", |c| c.engine.claim_batch = 0),
        ("engine.claim_batch", |c| {
            c.engine.claim_batch = MAX_CLAIM_BATCH + 1
        }),
        ("engine.max_prefetched", |c| c.engine.max_prefetched = 0),
        ("engine.lease", |c| c.engine.lease = Duration::ZERO),
        ("engine.lease", |c| c.engine.lease = secs(6)),
        ("engine.lease", |c| c.redis.response_timeout = secs(10)),
        ("redis.response_timeout", |c| {
            c.redis.response_timeout = Duration::ZERO
        }),
        ("engine.max_payload", |c| c.engine.max_payload = 0),
        ("queue_defaults.partitions", |c| {
            c.queue_defaults.partitions = 0
        }),
        ("queue_defaults.concurrency", |c| {
            c.queue_defaults.concurrency = 0
        }),
        ("queue_defaults.concurrency", |c| {
            c.queue_defaults.concurrency = MAX_CONCURRENCY + 1
        }),
        ("queue_defaults.max_attempts", |c| {
            c.queue_defaults.max_attempts = 0
        }),
        ("queue_defaults.timeout", |c| {
            c.queue_defaults.timeout = Duration::ZERO
        }),
        ("queue_defaults.backoff.initial", |c| {
            c.queue_defaults.backoff.initial = secs(600)
        }),
    ];
    for (key, spoil) in cases {
        let mut config = Config::default();
        spoil(&mut config);
        match config.validate() {
            Err(ConfigError::InvalidValue {
                key: found, line, ..
            }) => assert_eq!((found.as_str(), line), (key, None)),
            other => panic!("{key}: expected InvalidValue, got {other:?}"),
        }
    }
    let mut config = Config::default();
    config
        .queues
        .insert("no/slash".into(), QueueConfig::default());
    assert!(matches!(
        config.validate(),
        Err(ConfigError::InvalidQueueName { ref name, .. }) if name == "no/slash"
    ));
}

#[test]
fn a_lease_within_three_response_timeouts_is_refused_with_the_rule() {
    // The default response timeout is 2s: a 6s lease renews every 2s, and one slow renewal
    // would let it run out under a healthy handler.
    let error = parse_err("engine:\n  lease: 6s\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, value, line: Some(2), .. }
            if key == "engine.lease" && value == "6s"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("3 x redis.response_timeout (3 x 2s = 6s)"),
        "the rule and both values are named: {message}"
    );
    assert!(message.contains("every 2s"), "{message}");

    // Shortening the response timeout makes a short lease safe; just above the floor passes.
    let config = Config::from_yaml_str(
        "redis:\n  response_timeout: 500ms\nengine:\n  lease: 2s\n",
        SRC,
    )
    .expect("2s > 3 x 500ms");
    assert_eq!(config.redis.response_timeout, millis(500));
    assert!(Config::from_yaml_str("engine:\n  lease: 6001ms\n", SRC).is_ok());

    // A response timeout written in the file but too long for the default lease.
    let error = parse_err("redis:\n  response_timeout: 10s\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, .. } if key == "engine.lease"),
        "{error:?}"
    );
    assert!(error.to_string().contains("(3 x 10s = 30s)"), "{error}");
}

#[test]
fn the_renewal_period_is_a_third_of_the_lease() {
    let mut engine = EngineConfig::default();
    assert_eq!(engine.lease_renewal_period(), secs(10));
    engine.lease = millis(15);
    assert_eq!(engine.lease_renewal_period(), millis(10), "floored at 10ms");
}

#[test]
fn concurrency_is_bounded_instead_of_panicking_in_the_semaphore() {
    let huge = usize::MAX.to_string();
    for (value, accepted) in [
        ("1", true),
        ("10000", true),
        ("10001", false),
        (huge.as_str(), false),
    ] {
        let text = format!("queues:\n  q:\n    concurrency: {value}\n");
        match Config::from_yaml_str(&text, SRC) {
            Ok(config) => {
                assert!(accepted, "{value} must be refused");
                assert_eq!(config.queue("q").concurrency.to_string(), value);
            }
            Err(error) => {
                assert!(!accepted, "{value} must be accepted: {error}");
                assert!(
                    matches!(&error, ConfigError::InvalidValue { key, line: Some(3), .. }
                        if key == "queues.q.concurrency"),
                    "{value}: {error:?}"
                );
                assert!(
                    error.to_string().contains("between 1 and 10000"),
                    "{value}: {error}"
                );
            }
        }
    }
}

#[test]
fn passwords_never_reach_messages_or_debug_output() {
    let mut config = Config::default();
    config.redis.url = "http://user:hunter2@host:6379".into();
    let message = config.validate().expect_err("bad scheme").to_string();
    assert!(
        !message.contains("hunter2") && message.contains("user:***@host"),
        "{message}"
    );
    config.redis.url = "redis://:hunter2@host:6379/0".into();
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("hunter2") && debug.contains("redis://:***@host"),
        "{debug}"
    );
}

#[test]
fn backoff_grows_exponentially_up_to_the_cap() {
    let queue = QueueConfig::default(); // 1s .. 5m
    let full: Vec<u64> = (1..=10)
        .map(|attempt| queue.backoff_delay(attempt, 1.0).as_secs())
        .collect();
    assert_eq!(full, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    assert_eq!(
        queue.backoff_delay(0, 1.0),
        secs(1),
        "attempt 0 counts as 1"
    );
    for attempt in [30, 33, 64, u32::MAX] {
        assert_eq!(
            queue.backoff_delay(attempt, 1.0),
            secs(300),
            "attempt {attempt}"
        );
    }
    let huge = QueueConfig {
        backoff: BackoffConfig {
            initial: MAX_DURATION,
            max: MAX_DURATION,
        },
        ..QueueConfig::default()
    };
    assert_eq!(huge.backoff_delay(31, 1.0), MAX_DURATION, "no overflow");
}

#[test]
fn backoff_jitter_stays_between_half_and_all_of_the_delay() {
    let queue = QueueConfig::default();
    for attempt in 1..=12 {
        let base = queue.backoff_delay(attempt, 1.0);
        assert_eq!(queue.backoff_delay(attempt, 0.0), base / 2);
        for step in 0..=20 {
            let delay = queue.backoff_delay(attempt, f64::from(step) / 20.0);
            assert!(
                delay >= base / 2 && delay <= base,
                "{attempt} {step}: {delay:?}"
            );
        }
        for silly in [-1.0, 2.0, f64::NAN, f64::INFINITY] {
            let delay = queue.backoff_delay(attempt, silly);
            assert!(delay >= base / 2 && delay <= base, "{silly}: {delay:?}");
        }
    }
    assert_eq!(queue.backoff_delay(2, 0.5), millis(1500));
}

#[test]
fn max_running_defaults_to_1024_and_is_refused_below_1_naming_key_value_and_line() {
    assert_eq!(Config::default().node.max_running, DEFAULT_MAX_RUNNING);
    assert_eq!(DEFAULT_MAX_RUNNING, 1_024);
    let config = Config::from_yaml_str("node:\n  max_running: 8\n", SRC).expect("valid");
    assert_eq!(config.node.max_running, 8);
    for (value, reason) in [
        ("0", "between 1 and"),
        ("-3", ""),
        ("1000001", "between 1 and"),
    ] {
        let text = format!("node:\n  name: n\n  max_running: {value}\n");
        let error = Config::from_yaml_str(&text, SRC).expect_err("refused");
        assert!(
            matches!(&error, ConfigError::InvalidValue { key, value: found, line: Some(3), .. }
                if key == "node.max_running" && found == value),
            "{value}: {error:?}"
        );
        assert!(error.to_string().contains(reason), "{value}: {error}");
    }
}
