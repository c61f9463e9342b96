//! The Redis topology keys: `redis.url` | `redis.cluster` | `redis.sentinel`, `redis.tls`,
//! `redis.wait_replicas`, their environment variables, and the options they connect with.

use delayq_redis::Topology;

use super::*;

#[test]
fn a_cluster_is_a_list_of_seed_urls() {
    let config = Config::from_yaml_str(
        "redis:\n  cluster:\n    - redis://10.0.0.1:7000\n    - redis://10.0.0.2:7000\n",
        SRC,
    )
    .expect("valid");
    assert_eq!(
        config.connect_options().topology,
        Topology::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    );
    let flow = Config::from_yaml_str("redis:\n  cluster: [redis://a:1, redis://b:2]\n", SRC)
        .expect("flow style");
    assert_eq!(flow.redis.cluster.len(), 2);
}

#[test]
fn a_sentinel_set_names_its_master_and_may_carry_its_own_password() {
    let config = Config::from_yaml_str(
        "redis:\n  sentinel:\n    urls: [redis://app:pw@10.0.0.1:26379]\n    master: mymaster\n    password: sentinel-secret\n  tls:\n    ca_file: ca.pem\n",
        SRC,
    )
    .expect("valid");
    let options = config.connect_options();
    match &options.topology {
        Topology::Sentinel {
            urls,
            master,
            sentinel_credentials,
        } => {
            assert_eq!(urls, &["redis://app:pw@10.0.0.1:26379".to_owned()]);
            assert_eq!(master, "mymaster");
            assert!(sentinel_credentials.is_some());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        options.tls.and_then(|tls| tls.ca_file),
        Some(PathBuf::from("ca.pem"))
    );
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("sentinel-secret") && !shown.contains(":pw@"),
        "{shown}"
    );
}

#[test]
fn two_topologies_are_an_error_naming_both_keys() {
    let error = parse_err("redis:\n  url: redis://a:1\n  cluster: [redis://b:2]\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, line: Some(3), .. } if key == "redis.cluster"),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("redis.url is set on line 2"),
        "{error}"
    );
}

#[test]
fn a_sentinel_without_a_master_is_refused() {
    let error = parse_err("redis:\n  sentinel:\n    urls: [redis://a:26379]\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, .. } if key == "redis.sentinel.master"),
        "{error:?}"
    );
}

#[test]
fn unknown_keys_under_sentinel_and_tls_are_named() {
    let error = parse_err("redis:\n  tls:\n    ca: x.pem\n");
    assert!(
        matches!(&error, ConfigError::UnknownKey { key, line: 3, .. } if key == "redis.tls.ca"),
        "{error:?}"
    );
    assert!(error.to_string().contains("ca_file"), "{error}");
}

#[test]
fn wait_replicas_needs_a_wait_timeout_below_the_response_timeout() {
    let config = Config::from_yaml_str("redis:\n  wait_replicas: 1\n", SRC).expect("valid");
    assert_eq!(
        config.wait_for_replicas(),
        Some((1, Duration::from_millis(100)))
    );
    assert_eq!(Config::default().wait_for_replicas(), None);
    let error = parse_err("redis:\n  wait_replicas: 1\n  wait_timeout: 5s\n");
    assert!(
        matches!(&error, ConfigError::InvalidValue { key, .. } if key == "redis.wait_timeout"),
        "{error:?}"
    );
}

#[test]
fn the_environment_chooses_the_topology_and_two_variables_are_an_error() {
    let mut config = Config::from_yaml_str("redis:\n  url: redis://file:1\n", SRC).expect("valid");
    config.apply_env_from(env(&[(
        "DELAYQ_REDIS_CLUSTER",
        "redis://a:7000, redis://b:7000",
    )]));
    assert_eq!(
        config.connect_options().topology,
        Topology::cluster(["redis://a:7000", "redis://b:7000"])
    );
    config.apply_env_from(env(&[
        ("DELAYQ_REDIS_SENTINEL", "redis://s1:26379,redis://s2:26379"),
        ("DELAYQ_REDIS_SENTINEL_MASTER", "mymaster"),
    ]));
    assert_eq!(
        config.connect_options().topology,
        Topology::sentinel(["redis://s1:26379", "redis://s2:26379"], "mymaster")
    );
    config.validate().expect("valid");
    let conflict = crate::config::topology::topology_env_conflict(&env(&[
        ("DELAYQ_REDIS_URL", "redis://x:1"),
        ("DELAYQ_REDIS_CLUSTER", "redis://a:7000"),
    ]))
    .expect("a conflict");
    let message = conflict.to_string();
    assert!(
        message.contains("DELAYQ_REDIS_URL") && message.contains("DELAYQ_REDIS_CLUSTER"),
        "{message}"
    );
}
