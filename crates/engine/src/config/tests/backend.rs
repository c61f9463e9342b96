//! `backend:` and `postgres:`: parsing, the environment, and the rules that change with the
//! backend.

use super::*;

#[test]
fn redis_is_the_default_and_postgres_reads_its_section() {
    assert_eq!(Config::default().backend, Backend::Redis);
    let config = Config::from_yaml_str(
        "backend: postgres\npostgres:\n  url: postgres://u:pw@db:5432/app\n  schema: jobs\n  pool_size: 4\n  statement_timeout: 2s\n",
        SRC,
    )
    .expect("valid");
    assert_eq!(config.backend, Backend::Postgres);
    assert_eq!(config.postgres.url, "postgres://u:pw@db:5432/app");
    assert_eq!(config.postgres.schema, "jobs");
    assert_eq!(config.postgres.pool_size, 4);
    assert_eq!(config.postgres.statement_timeout, secs(2));
    let settings = config.postgres_settings();
    assert!(
        settings.application_name.starts_with("delayq "),
        "{settings:?}"
    );
    // The Debug output hides the password.
    assert!(!format!("{config:?}").contains("pw@"));
}

#[test]
fn bad_backend_and_postgres_values_name_the_key_and_the_value() {
    let message = parse_err("backend: mysql\n").to_string();
    assert!(
        message.contains("`backend`") && message.contains("mysql") && message.contains("line 1"),
        "{message}"
    );
    let message = parse_err("postgres:\n  pool: 3\n").to_string();
    assert!(message.contains("unknown key `postgres.pool`"), "{message}");
    assert!(
        message.contains("pool_size"),
        "the hint lists the known keys: {message}"
    );
    let message = parse_err("backend: postgres\npostgres:\n  schema: pg_jobs\n").to_string();
    assert!(
        message.contains("postgres.schema") && message.contains("pg_jobs"),
        "{message}"
    );
    let message = parse_err(
        "backend: postgres\npostgres:\n  url: 'postgres://u:secret@db/app?sslmode=nope'\n",
    )
    .to_string();
    assert!(message.contains("postgres.url"), "{message}");
    assert!(
        !message.contains("secret"),
        "the password stays hidden: {message}"
    );
    let message = parse_err("backend: postgres\npostgres:\n  pool_size: 0\n").to_string();
    assert!(message.contains("postgres.pool_size"), "{message}");
}

#[test]
fn a_bad_postgres_section_is_ignored_on_the_redis_backend() {
    // A file may keep both sections to switch with DELAYQ_BACKEND.
    Config::from_yaml_str("postgres:\n  schema: pg_jobs\n", SRC).expect("not checked on Redis");
}

#[test]
fn the_environment_chooses_the_backend_and_the_url() {
    let mut config = Config::default();
    config.apply_env_from(env(&[
        ("DELAYQ_BACKEND", "postgres"),
        ("DELAYQ_POSTGRES_URL", "postgres://db/app"),
    ]));
    assert_eq!(config.backend, Backend::Postgres);
    assert_eq!(config.postgres.url, "postgres://db/app");
    let error = finish("", SRC, env(&[("DELAYQ_BACKEND", "pg")])).expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("DELAYQ_BACKEND") && message.contains("\"pg\""),
        "{message}"
    );
    let config = finish(
        "backend: postgres\n",
        SRC,
        env(&[("DELAYQ_BACKEND", "redis")]),
    )
    .expect("the environment wins");
    assert_eq!(config.backend, Backend::Redis);
}

#[test]
fn the_lease_must_outlast_three_statement_timeouts_on_postgres() {
    let text = "backend: postgres\npostgres:\n  statement_timeout: 5s\nengine:\n  lease: 15s\n";
    let message = parse_err(text).to_string();
    assert!(
        message.contains("engine.lease") && message.contains("postgres.statement_timeout"),
        "{message}"
    );
    // The Redis timeout does not bind a PostgreSQL node, and 0 turns the bound off.
    Config::from_yaml_str(
        "backend: postgres\nredis:\n  response_timeout: 30s\nengine:\n  lease: 16s\n",
        SRC,
    )
    .expect("valid");
    Config::from_yaml_str(
        "backend: postgres\npostgres:\n  statement_timeout: 0\nengine:\n  lease: 1s\n",
        SRC,
    )
    .expect("valid");
}
