//! Reading YAML: defaults, every key, unknown keys and bad values with their lines.

use super::*;

#[test]
fn defaults_are_the_documented_ones() {
    let config = Config::default();
    assert_eq!(config.redis.url, "redis://127.0.0.1:6379/0");
    assert_eq!(config.redis.key_prefix, "delayq");
    assert_eq!(config.redis.response_timeout, secs(2));
    assert!(!config.node.name.trim().is_empty());
    assert_eq!(config.node.heartbeat_period, secs(1));
    assert_eq!(config.node.heartbeat_ttl, secs(3));
    assert_eq!(config.node.start_timeout, secs(10));
    let engine = &config.engine;
    assert_eq!(engine.pull_period, secs(1));
    assert_eq!(engine.prefetch_window, secs(5));
    assert_eq!(engine.max_prefetched, 100_000);
    assert_eq!(engine.claim_batch, 256);
    assert_eq!(engine.lease, secs(30));
    assert_eq!(engine.shutdown_grace, secs(10));
    assert_eq!(engine.executed_retention, secs(3600));
    assert_eq!(engine.max_payload, 1_048_576);
    let queue = config.queue_defaults;
    assert_eq!(
        (queue.partitions, queue.concurrency, queue.max_attempts),
        (64, 64, 5)
    );
    assert_eq!(queue.backoff.initial, secs(1));
    assert_eq!(queue.backoff.max, secs(300));
    assert_eq!(queue.timeout, secs(30));
    assert!(config.queues.is_empty());
    config.validate().expect("the defaults are valid");
}

#[test]
fn empty_text_and_empty_sections_take_the_defaults() {
    for text in [
        "",
        "# nothing\n",
        "redis:\nnode:\nengine:\nqueue_defaults:\nqueues:\n",
    ] {
        let config = Config::from_yaml_str(text, SRC).expect(text);
        assert_eq!(config, Config::default(), "{text:?}");
    }
}

#[test]
fn every_key_round_trips() {
    let text = "
redis:
  url: rediss://user:pw@redis.internal:6380/2
  key_prefix: staging
  response_timeout: 750ms
node:
  name: api-7
  heartbeat_period: 500ms
  heartbeat_ttl: 2s
  start_timeout: 1m
  max_running: 300
engine:
  pull_period: 2s
  idle_pull_period: 45s
  prefetch_window: 10s
  max_prefetched: 5000
  claim_batch: 64
  lease: 1m
  shutdown_grace: 3s
  executed_retention: 2h
  max_payload: 65536
queue_defaults:
  partitions: 16
  concurrency: 8
  max_attempts: 2
  backoff:
    initial: 100ms
    max: 1s
  timeout: 5s
queues:
  order-timeout:
    partitions: 128
    concurrency: 32
    max_attempts: 7
    backoff: { initial: 2s, max: 1h }
    timeout: 45s
  device.offline_v2:
    concurrency: 4
    backoff: { max: 9s }
";
    let config = Config::from_yaml_str(text, SRC).expect("valid");
    let defaults = QueueConfig {
        partitions: 16,
        concurrency: 8,
        max_attempts: 2,
        backoff: BackoffConfig {
            initial: millis(100),
            max: secs(1),
        },
        timeout: secs(5),
        rate_limit: None,
        global_concurrency: None,
        ..QueueConfig::default()
    };
    let expected = Config {
        redis: RedisConfig {
            url: "rediss://user:pw@redis.internal:6380/2".into(),
            key_prefix: "staging".into(),
            response_timeout: millis(750),
            ..RedisConfig::default()
        },
        node: NodeConfig {
            name: "api-7".into(),
            heartbeat_period: millis(500),
            heartbeat_ttl: secs(2),
            start_timeout: secs(60),
            max_running: 300,
        },
        engine: EngineConfig {
            pull_period: secs(2),
            idle_pull_period: secs(45),
            prefetch_window: secs(10),
            max_prefetched: 5000,
            claim_batch: 64,
            lease: secs(60),
            shutdown_grace: secs(3),
            executed_retention: secs(7200),
            max_payload: 65536,
        },
        queue_defaults: defaults,
        queues: [
            (
                "order-timeout".to_owned(),
                QueueConfig {
                    partitions: 128,
                    concurrency: 32,
                    max_attempts: 7,
                    backoff: BackoffConfig {
                        initial: secs(2),
                        max: secs(3600),
                    },
                    timeout: secs(45),
                    rate_limit: None,
                    global_concurrency: None,
                    ..QueueConfig::default()
                },
            ),
            (
                // Keys left out come from queue_defaults, also inside backoff.
                "device.offline_v2".to_owned(),
                QueueConfig {
                    concurrency: 4,
                    backoff: BackoffConfig {
                        initial: millis(100),
                        max: secs(9),
                    },
                    ..defaults
                },
            ),
        ]
        .into_iter()
        .collect(),
        // Sections this text does not write.
        ..Config::default()
    };
    assert_eq!(config, expected);
    assert_eq!(config.queue("order-timeout").partitions, 128);
    assert_eq!(config.queue("not-listed"), defaults);
}

#[test]
fn queue_defaults_apply_wherever_they_are_written() {
    let text = "queues:\n  q:\n    timeout: 1s\nqueue_defaults:\n  max_attempts: 9\n";
    let config = Config::from_yaml_str(text, SRC).expect("valid");
    assert_eq!(config.queue("q").max_attempts, 9);
    assert_eq!(config.queue("q").timeout, secs(1));
}

#[test]
fn the_design_example_parses() {
    let text = "
redis:
  url: redis://127.0.0.1:6379/0      # rediss:// for TLS; user:password@ for ACL
  key_prefix: delayq
node:
  name: api-1
  heartbeat_period: 1s
  heartbeat_ttl: 3s
engine:
  pull_period: 1s                    # how often owned partitions are re-read (safety net)
  prefetch_window: 5s                # how far ahead tasks are held in memory
  max_prefetched: 100000             # memory bound on the heap
  claim_batch: 256
  lease: 30s                         # in-flight lease; renewed while the handler runs
  shutdown_grace: 10s
  executed_retention: 1h
queues:
  order-timeout:
    partitions: 64
    concurrency: 64
    max_attempts: 5
    backoff: { initial: 1s, max: 5m }
    timeout: 30s
";
    let config = Config::from_yaml_str(text, SRC).expect("the design's example is valid");
    assert_eq!(config.node.name, "api-1");
    assert_eq!(config.queue("order-timeout"), QueueConfig::default());
}

#[test]
fn unknown_keys_name_their_dotted_path_and_line() {
    let cases = [
        ("redis:\n  url: redis://x\nreddis:\n  url: y\n", "reddis", 3),
        (
            "engine:\n  lease: 1s\n  pul_period: 1s\n",
            "engine.pul_period",
            3,
        ),
        ("node:\n  nmae: a\n", "node.nmae", 2),
        (
            "queue_defaults:\n  partitons: 8\n",
            "queue_defaults.partitons",
            2,
        ),
        (
            "queues:\n  order-timeout:\n    timeout: 1s\n    concurency: 4\n",
            "queues.order-timeout.concurency",
            4,
        ),
        (
            "queues:\n  q:\n    backoff:\n      initial: 1s\n      mux: 5m\n",
            "queues.q.backoff.mux",
            5,
        ),
        (
            "queues:\n  q:\n    backoff: { initial: 1s, mux: 5m }\n",
            "queues.q.backoff.mux",
            3,
        ),
    ];
    for (text, key, line) in cases {
        let error = parse_err(text);
        match &error {
            ConfigError::UnknownKey {
                source_name,
                key: found,
                line: found_line,
            } => {
                assert_eq!(
                    (source_name.as_str(), found.as_str(), *found_line),
                    (SRC, key, line)
                );
            }
            other => panic!("{text:?}: expected UnknownKey, got {other:?}"),
        }
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("{SRC}:{line}: unknown key `{key}`")),
            "{message}"
        );
    }
}

#[test]
fn unknown_key_message_lists_the_keys_allowed_there() {
    let message = parse_err("engine:\n  pul_period: 1s\n").to_string();
    assert!(
        message.contains("pull_period, prefetch_window"),
        "{message}"
    );
    let message = parse_err("queues:\n  q:\n    backoff: { mux: 1s }\n").to_string();
    assert!(
        message.contains("known keys here: initial, max"),
        "{message}"
    );
}

#[test]
fn a_bad_duration_names_key_value_and_line() {
    let error = parse_err("node:\n  name: a\n  heartbeat_ttl: 3 seconds please\n");
    match &error {
        ConfigError::InvalidValue {
            key, value, line, ..
        } => assert_eq!(
            (key.as_str(), value.as_str(), *line),
            ("node.heartbeat_ttl", "3 seconds please", Some(3))
        ),
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message
            .starts_with("invalid value \"3 seconds please\" for `node.heartbeat_ttl` at line 3"),
        "{message}"
    );
    // A number without a unit is not a duration either.
    let error = parse_err("queues:\n  q:\n    timeout: 30\n");
    assert_eq!(error.line(), Some(3));
    assert!(error.to_string().contains("queues.q.timeout"), "{error}");
}

#[test]
fn wrong_types_are_value_errors_with_lines() {
    for (text, key, line) in [
        ("engine:\n  claim_batch: many\n", "engine.claim_batch", 2),
        ("engine:\n  claim_batch: -1\n", "engine.claim_batch", 2),
        (
            "queue_defaults:\n  partitions: 4294967296\n",
            "queue_defaults.partitions",
            2,
        ),
        (
            "engine:\n  max_payload: 1 parsec\n",
            "engine.max_payload",
            2,
        ),
        ("engine: 5\n", "engine", 1),
        ("redis:\n  url: [a, b]\n", "redis.url", 2),
        ("engine:\n  lease:\n", "engine.lease", 2),
    ] {
        match parse_err(text) {
            ConfigError::InvalidValue {
                key: found,
                line: found_line,
                ..
            } => assert_eq!((found.as_str(), found_line), (key, Some(line)), "{text:?}"),
            other => panic!("{text:?}: expected InvalidValue, got {other:?}"),
        }
    }
}

#[test]
fn broken_yaml_is_a_parse_error_with_position() {
    let error = parse_err("engine:\n  lease: [1s\nnode: {}\n");
    assert!(
        matches!(error, ConfigError::Parse { ref source_name, line, .. } if source_name == SRC && line >= 2),
        "{error:?}"
    );
    let error = parse_err("engine:\n  lease: 1s\n  lease: 2s\n");
    assert!(
        matches!(error, ConfigError::Parse { line: 3, .. }),
        "{error:?}"
    );
    assert!(error.to_string().starts_with("test.yaml:3:"), "{error}");
}

#[test]
fn recurring_schedules_are_read_and_validated_with_their_key_and_line() {
    let text = "recurring:\n  nightly:\n    queue: reports\n    cron: \"0 9 * * *\"\n    tz: Europe/Berlin\n  sweep:\n    queue: carts\n    every: 30s\n    overlap: skip\n    max_catchup: 5\n";
    let config = Config::from_yaml_str(text, SRC).expect("valid");
    assert_eq!(config.recurring.len(), 2);
    assert_eq!(config.recurring["sweep"].max_catchup, 5);
    assert_eq!(config.recurring["nightly"].queue.as_str(), "reports");

    let error = parse_err("recurring:\n  nightly:\n    queue: reports\n    cron: \"0 25 * * *\"\n");
    match &error {
        ConfigError::InvalidValue {
            key, value, line, ..
        } => assert_eq!(
            (key.as_str(), value.as_str(), *line),
            ("recurring.nightly.cron", "0 25 * * *", Some(4))
        ),
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    let error = parse_err("recurring:\n  a@b:\n    queue: q\n    every: 1s\n");
    assert!(error.to_string().contains("a@b"), "{error}");
    assert_eq!(error.line(), Some(2));
    let error = parse_err("recurring:\n  s:\n    queue: q\n    every: 1s\n    evry: 2s\n");
    assert!(error.to_string().contains("recurring.s.evry"), "{error}");
    let error = parse_err("recurring:\n  s:\n    every: 1s\n");
    assert!(error.to_string().contains("queue"), "{error}");
    let error = parse_err("recurring:\n  s:\n    queue: q\n    every: 1s\n    tz: Europe/Berlin\n");
    assert!(error.to_string().contains("tz"), "{error}");
}

#[test]
fn queue_limits_are_read_and_bad_ones_name_their_key() {
    let text = "queues:\n  q:\n    rate_limit: 200/s\n    global_concurrency: 20\n  r:\n    rate_limit: 1000/1m\n  s:\n    rate_limit: 5/500ms\n";
    let config = Config::from_yaml_str(text, SRC).expect("valid");
    let q = config.queue("q");
    assert_eq!(q.global_concurrency, Some(20));
    let rate = q.rate_limit.expect("a rate");
    assert_eq!((rate.count, rate.period), (200, secs(1)));
    let rate = config.queue("r").rate_limit.expect("a rate");
    assert_eq!((rate.count, rate.period), (1000, secs(60)));
    assert_eq!(
        config.queue("s").rate_limit.expect("a rate").period,
        millis(500)
    );
    assert_eq!(config.queue("t").rate_limit, None);
    for (bad, why) in [
        ("fast", "N/PERIOD"),
        ("0/s", "at least 1"),
        ("10/fortnightly", "N/PERIOD"),
        ("x/s", "whole number"),
    ] {
        let error = parse_err(&format!("queues:\n  q:\n    rate_limit: {bad}\n"));
        let message = error.to_string();
        assert!(message.contains("queues.q.rate_limit"), "{message}");
        assert!(message.contains(why), "{bad}: {message}");
        assert_eq!(error.line(), Some(3));
    }
    let error = parse_err("queues:\n  q:\n    global_concurrency: 0\n");
    assert!(
        error.to_string().contains("queues.q.global_concurrency"),
        "{error}"
    );
}

#[test]
fn flow_keys_and_per_key_limits_are_read_and_bad_ones_name_their_key() {
    let text = "queues:\n  hooks:\n    flow_keys: true\n    per_key_concurrency: 2\n    per_key_rate: 10/1m\n  ledger:\n    flow_keys: true\n    per_key_order: fifo\n";
    let config = Config::from_yaml_str(text, SRC).expect("valid");
    let hooks = config.queue("hooks");
    let limits = hooks.flow_limits();
    assert!(hooks.flow_keys);
    assert_eq!(limits.concurrency, Some(2));
    let rate = limits.rate.expect("a rate");
    assert_eq!((rate.limit, rate.period_ms), (10, 60_000));
    assert!(!limits.fifo);
    let ledger = config.queue("ledger").flow_limits();
    assert!(ledger.fifo && ledger.slots() == Some(1));
    assert!(config.queue("plain").flow_limits().is_unlimited());
    for (bad, key, why) in [
        ("flow_keys: yes please", "flow_keys", "true or false"),
        (
            "per_key_concurrency: 0",
            "per_key_concurrency",
            "at least 1",
        ),
        ("per_key_rate: 0/s", "per_key_rate", "at least 1"),
        ("per_key_order: lifo", "per_key_order", "fifo"),
    ] {
        let setting = if key == "flow_keys" {
            ""
        } else {
            "flow_keys: true\n    "
        };
        let error = parse_err(&format!("queues:\n  q:\n    {setting}{bad}\n"));
        let message = error.to_string();
        assert!(message.contains(&format!("queues.q.{key}")), "{message}");
        assert!(message.contains(why), "{bad}: {message}");
    }
    // Per-key limits without flow keys cannot hold across partitions: refused by name.
    for limit in [
        "per_key_concurrency: 1",
        "per_key_rate: 1/s",
        "per_key_order: fifo",
    ] {
        let error = parse_err(&format!("queues:\n  q:\n    {limit}\n"));
        let message = error.to_string();
        assert!(message.contains("flow_keys: true"), "{limit}: {message}");
        let key = limit.split(':').next().unwrap_or_default();
        assert!(message.contains(&format!("queues.q.{key}")), "{message}");
    }
}
