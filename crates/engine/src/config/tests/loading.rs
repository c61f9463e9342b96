//! Files, the environment, and the checked-in example configuration.

use super::*;

#[test]
fn environment_overrides_the_file() {
    let env = |name: &str| match name {
        "DELAYQ_REDIS_URL" => Some("redis://10.0.0.1:6379/3".to_owned()),
        "DELAYQ_KEY_PREFIX" => Some("blue".to_owned()),
        "DELAYQ_NODE_NAME" => Some(String::new()), // empty counts as unset
        _ => None,
    };
    let mut config =
        Config::from_yaml_str("redis:\n  key_prefix: green\nnode:\n  name: api-1\n", SRC)
            .expect("valid");
    config.apply_env_from(env);
    assert_eq!(config.redis.url, "redis://10.0.0.1:6379/3");
    assert_eq!(config.redis.key_prefix, "blue");
    assert_eq!(config.node.name, "api-1");
    config.apply_env_from(|name| (name == "DELAYQ_NODE_NAME").then(|| "api-9".to_owned()));
    assert_eq!(config.node.name, "api-9");
}

#[test]
fn an_invalid_override_is_not_blamed_on_the_file() {
    let text = "redis:\n  key_prefix: green\n";
    let error = finish(text, SRC, |name| {
        (name == "DELAYQ_KEY_PREFIX").then(|| "has space".to_owned())
    })
    .expect_err("bad prefix from the environment");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, line: None, .. } if key == "redis.key_prefix"),
        "{error:?}"
    );
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let file = TempFile::new("good", "engine:\n  claim_batch: 32\n");
    let config = load_file(&file.0, |_| None, MissingFile::Error).expect("loads");
    assert_eq!(config.engine.claim_batch, 32);

    let file = TempFile::new("bad", "engine:\n  claim_bach: 32\n");
    let message = load_file(&file.0, |_| None, MissingFile::Error)
        .expect_err("typo")
        .to_string();
    assert!(
        message.starts_with(&format!("{}:2: unknown key", file.0.display())),
        "{message}"
    );

    let missing = std::env::temp_dir().join("delayq-config-no-such-file.yaml");
    let error = Config::load_or_default(Some(&missing)).expect_err("explicit path must exist");
    assert!(
        matches!(&error, ConfigError::Read { path, .. } if path == &missing),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("delayq-config-no-such-file.yaml"),
        "{error}"
    );
}

#[test]
fn a_missing_default_file_means_the_defaults_plus_environment() {
    let missing = std::env::temp_dir().join("delayq-config-absent-default.yaml");
    let config = load_file(
        &missing,
        |name| (name == "DELAYQ_NODE_NAME").then(|| "from-env".to_owned()),
        MissingFile::UseDefaults,
    )
    .expect("defaults");
    assert_eq!(config.node.name, "from-env");
    assert_eq!(config.engine, EngineConfig::default());
}

#[test]
fn the_checked_in_cluster_yaml_is_valid_and_documents_every_key() {
    let text = include_str!("../../../../../cluster.yaml");
    let config = Config::from_yaml_str(text, "cluster.yaml").expect("cluster.yaml is valid");
    // Everything but the queues is written out at its default (node.name is commented out).
    let defaults = Config::default();
    assert_eq!(config.backend, defaults.backend);
    assert_eq!(config.redis, defaults.redis);
    assert_eq!(config.postgres, defaults.postgres);
    assert_eq!(config.http, defaults.http);
    assert_eq!(config.node, defaults.node);
    assert_eq!(config.engine, defaults.engine);
    assert_eq!(config.queue_defaults, defaults.queue_defaults);
    assert_eq!(config.queue("order-timeout"), QueueConfig::default());
    let device = config.queue("device-offline");
    assert_eq!(device.partitions, 64);
    assert_eq!(device.concurrency, 128);
    assert_eq!(device.max_attempts, 3);
    assert_eq!(device.backoff.initial, millis(200));
    assert_eq!(device.timeout, secs(5));
    let webhooks = config.queue("webhooks");
    assert!(webhooks.flow_keys);
    assert_eq!(webhooks.per_key_concurrency, Some(2));
    assert_eq!(webhooks.per_key_rate.map(|rate| rate.count), Some(60));
    assert!(!webhooks.per_key_fifo);
    assert_eq!(config.queues.len(), 3);
    let report = &config.recurring["nightly-report"];
    assert_eq!(report.queue.as_str(), "reports");
    assert_eq!(config.recurring.len(), 1);

    for key in schema::TOP_KEYS
        .iter()
        .chain(schema::REDIS_KEYS)
        .chain(super::super::backend::POSTGRES_KEYS)
        .chain(schema::HTTP_KEYS)
        .chain(schema::NODE_KEYS)
        .chain(schema::ENGINE_KEYS)
        .chain(schema::QUEUE_KEYS)
        .chain(schema::BACKOFF_KEYS)
        .chain(schema::RECURRING_KEYS)
    {
        assert!(
            text.contains(&format!("{key}:")),
            "cluster.yaml does not document `{key}`"
        );
    }
    for (variable, _) in ENV_OVERRIDES
        .iter()
        .chain(&super::super::backend::BACKEND_ENV)
    {
        assert!(
            text.contains(variable),
            "cluster.yaml does not mention {variable}"
        );
    }
}
