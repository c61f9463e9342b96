//! Redis Functions on one server: library scripts go out as `FCALL`, the library is loaded
//! again after `FUNCTION FLUSH`, and the `EVALSHA` twins take over where Functions cannot be
//! used: a server without them (Redis 6 is simulated by renaming `FCALL` and `FUNCTION`
//! away, which gives the same `unknown command` answer), a user without the permission (also
//! when it is taken away mid-run), and `ConnectOptions::functions` off.

mod support;

use delayq_redis::{Error, Library, LibraryBuilder, RedisConnection, Script, ScriptCall, Topology};
use delayq_testkit::{RedisOptions, RedisServer, DELAYQ_COMMANDS};
use redis::Value;
use support::options;

/// A library with a shared helper and two functions.
fn library() -> (Library, Vec<Script>) {
    let shared = "local function step(n) return tonumber(n) or 1 end";
    let mut builder = LibraryBuilder::new("test", &[shared]);
    builder.function(
        "bump",
        &[shared],
        "return redis.call('INCRBY', KEYS[1], step(ARGV[1]))",
    );
    builder.function(
        "refuse",
        &[],
        "return redis.error_reply('DELAYQ_STALE the token no longer holds the lease')",
    );
    builder.build()
}

/// `calls=` of `cmdstat_<command>` on `server`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::from_redis_value(
        server
            .command(&["INFO", "commandstats"])
            .expect("INFO commandstats"),
    )
    .expect("INFO text");
    delayq_testkit::command_calls(&info, command)
}

/// The libraries `FUNCTION LIST` shows.
fn libraries(server: &RedisServer) -> String {
    format!(
        "{:?}",
        server
            .command(&["FUNCTION", "LIST"])
            .expect("FUNCTION LIST")
    )
}

/// Five calls of `bump` on five partitions' keys, in one batch: each must answer `expected`.
async fn bump_all(redis: &RedisConnection, bump: &Script, expected: i64) {
    let keys: Vec<String> = (0..5).map(|p| format!("delayq:{{q:{p}}}:n")).collect();
    let calls: Vec<ScriptCall<'_>> = keys
        .iter()
        .map(|key| ScriptCall::new(bump).key(key).arg(1))
        .collect();
    for reply in redis.run_scripts(&calls).await {
        assert_eq!(reply.expect("a batched call"), Value::Int(expected));
    }
}

async fn bump_one(redis: &RedisConnection, bump: &Script) -> Value {
    redis
        .run_script(&ScriptCall::new(bump).key("delayq:{q:0}:n").arg(1))
        .await
        .expect("a single call")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_scripts_go_out_as_fcall_and_survive_function_flush() {
    let server = RedisServer::start();
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let (library, scripts) = library();
    redis.load_library(&library).await.expect("FUNCTION LOAD");
    assert!(libraries(&server).contains(library.name()));
    // Loading again (another node, another connection) is a no-op.
    redis
        .load_library(&library)
        .await
        .expect("FUNCTION LOAD again");

    bump_all(&redis, &scripts[0], 1).await;
    assert!(redis.uses_functions());
    assert_eq!(calls(&server, "fcall"), 5);
    assert_eq!(calls(&server, "evalsha"), 0);

    // The library is gone: batched and single calls load it again and run once.
    server
        .command(&["FUNCTION", "FLUSH"])
        .expect("FUNCTION FLUSH");
    bump_all(&redis, &scripts[0], 2).await;
    server
        .command(&["FUNCTION", "FLUSH"])
        .expect("FUNCTION FLUSH");
    assert_eq!(bump_one(&redis, &scripts[0]).await, Value::Int(3));
    assert!(libraries(&server).contains(library.name()));
    assert_eq!(calls(&server, "evalsha"), 0, "no detour through scripts");

    let error = redis
        .run_script(&ScriptCall::new(&scripts[1]))
        .await
        .expect_err("a function's error reply");
    assert!(
        matches!(error, Error::Command { code: Some(ref code), transient: false, .. } if code == "DELAYQ_STALE"),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_functions_runs_the_evalsha_twins() {
    let conf =
        std::env::temp_dir().join(format!("delayq-no-functions-{}.conf", std::process::id()));
    std::fs::write(
        &conf,
        "rename-command FCALL \"\"\nrename-command FUNCTION \"\"\n",
    )
    .expect("write the config");
    let server = RedisServer::start_with(RedisOptions {
        extra_args: vec![("include".to_owned(), conf.display().to_string())],
        ..RedisOptions::default()
    });
    let _ = std::fs::remove_file(&conf);
    assert!(
        server.command(&["FUNCTION", "LIST"]).is_err(),
        "the server must not know FUNCTION"
    );
    let redis = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    let (library, scripts) = library();
    redis
        .load_library(&library)
        .await
        .expect("the scripts are loaded instead");
    assert!(!redis.uses_functions());
    bump_all(&redis, &scripts[0], 1).await;
    assert_eq!(bump_one(&redis, &scripts[0]).await, Value::Int(2));
    assert_eq!(calls(&server, "evalsha"), 6);

    // A connection that did not load the library first finds out on its first call.
    let late = RedisConnection::connect(options(Topology::standalone(server.url())))
        .await
        .expect("connect");
    assert!(late.uses_functions());
    assert_eq!(bump_one(&late, &scripts[0]).await, Value::Int(3));
    assert!(!late.uses_functions());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_off_in_the_options_uses_evalsha_only() {
    let server = RedisServer::start();
    let redis =
        RedisConnection::connect(options(Topology::standalone(server.url())).with_functions(false))
            .await
            .expect("connect");
    let (library, scripts) = library();
    redis.load_library(&library).await.expect("SCRIPT LOAD");
    assert!(!libraries(&server).contains(library.name()));
    bump_all(&redis, &scripts[0], 1).await;
    assert_eq!(calls(&server, "fcall"), 0);
    assert_eq!(calls(&server, "evalsha"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_function_permissions_falls_back_to_scripts() {
    let server = RedisServer::start();
    // The documented commands, then two users: one without the Functions permissions, one
    // with them, which lose them mid-run.
    let allowed: Vec<String> = DELAYQ_COMMANDS
        .iter()
        .map(|command| format!("+{command}"))
        .chain(["+incrby".to_owned()])
        .collect();
    let without: Vec<String> = allowed
        .iter()
        .filter(|rule| !rule.starts_with("+fcall") && !rule.starts_with("+function"))
        .cloned()
        .collect();
    for (user, rules) in [("plain", &without), ("full", &allowed)] {
        let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "~delayq:*", "-@all"];
        args.extend(rules.iter().map(String::as_str));
        server.command(&args).expect("ACL SETUSER");
    }
    let url_of = |user: &str| format!("redis://{user}:pw@127.0.0.1:{}/0", server.port());
    let (library, scripts) = library();

    let plain = RedisConnection::connect(options(Topology::standalone(url_of("plain"))))
        .await
        .expect("connect as plain");
    plain
        .load_library(&library)
        .await
        .expect("no +function|load: the scripts are loaded instead");
    assert!(!plain.uses_functions());
    bump_all(&plain, &scripts[0], 1).await;

    let full = RedisConnection::connect(options(Topology::standalone(url_of("full"))))
        .await
        .expect("connect as full");
    full.load_library(&library).await.expect("FUNCTION LOAD");
    bump_all(&full, &scripts[0], 2).await;
    assert!(full.uses_functions());
    server
        .command(&["ACL", "SETUSER", "full", "-fcall"])
        .expect("take +fcall away");
    bump_all(&full, &scripts[0], 3).await;
    assert!(!full.uses_functions());
    assert_eq!(bump_one(&full, &scripts[0]).await, Value::Int(4));
}
