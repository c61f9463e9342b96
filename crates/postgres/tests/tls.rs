//! TLS on a real server that accepts TCP logins only over TLS, with a certificate for
//! 127.0.0.1 and localhost signed by a test CA.

mod support;

use delayq_postgres::{Database, PostgresConfig, RetryPolicy};
use delayq_testkit::{PostgresOptions, PostgresServer, TlsFiles};

fn tls_server() -> PostgresServer {
    PostgresServer::start_with(PostgresOptions {
        tls: true,
        ..PostgresOptions::default()
    })
}

fn with_params(server: &PostgresServer, host: &str, params: &str) -> Database {
    let url = format!(
        "postgres://{}:{}@{host}:{}/{}?{params}",
        PostgresServer::USER,
        PostgresServer::PASSWORD,
        server.port(),
        delayq_testkit::POSTGRES_DATABASE
    );
    Database::new(&PostgresConfig::new(url))
        .expect("valid settings")
        .with_retry(RetryPolicy::none())
}

/// Whether this session is encrypted, and the client certificate's subject if one was sent.
async fn ssl_of(database: &Database) -> delayq_postgres::Result<(bool, Option<String>)> {
    database
        .run("pg_stat_ssl", |client| {
            Box::pin(async move {
                let row = client
                    .query_one(
                        "SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                        &[],
                    )
                    .await?;
                Ok((row.get(0), row.get(1)))
            })
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_connects_with_the_test_ca() {
    let server = tls_server();
    let files = server.tls_files().expect("a TLS server");
    let ca = files.ca_file.display();
    let database = with_params(
        &server,
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert_eq!(ssl_of(&database).await.expect("connects"), (true, None));
    let by_name = with_params(
        &server,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    assert!(ssl_of(&by_name).await.expect("connects by name").0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_certificate_for_another_name_and_verify_ca_accepts_it() {
    let server = tls_server();
    let ca = server
        .tls_files()
        .expect("a TLS server")
        .ca_file
        .display()
        .to_string();
    // Connect to 127.0.0.1 but verify as db.example.invalid, a name the certificate lacks.
    let full = with_params(
        &server,
        "db.example.invalid",
        &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"),
    );
    let error = ssl_of(&full).await.expect_err("wrong name");
    assert!(error.to_string().contains("not valid for name"), "{error}");
    assert!(!error.is_transient(), "{error}");
    let ca_only = with_params(
        &server,
        "db.example.invalid",
        &format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={ca}"),
    );
    assert!(
        ssl_of(&ca_only)
            .await
            .expect("verify-ca ignores the name")
            .0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused() {
    let server = tls_server();
    let other = TlsFiles::generate();
    let database = with_params(
        &server,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", other.ca_file.display()),
    );
    let error = ssl_of(&database).await.expect_err("untrusted CA");
    assert!(
        error.to_string().contains("invalid peer certificate"),
        "{error}"
    );
    assert!(!error.is_transient(), "{error}");
    // `require` with that root file verifies too, as libpq does.
    let require = with_params(
        &server,
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={}", other.ca_file.display()),
    );
    assert!(ssl_of(&require).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_and_prefer_encrypt_without_verifying_and_disable_is_refused() {
    let server = tls_server();
    for mode in ["require", "prefer"] {
        let database = with_params(&server, "127.0.0.1", &format!("sslmode={mode}"));
        assert!(ssl_of(&database).await.expect(mode).0, "{mode}");
    }
    let plain = with_params(&server, "127.0.0.1", "sslmode=disable");
    let error = ssl_of(&plain).await.expect_err("the server wants TLS");
    assert_eq!(error.code(), Some("28000"), "{error}");
    assert!(!error.is_transient());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_sent() {
    let server = tls_server();
    let files = server.tls_files().expect("a TLS server");
    let database = with_params(
        &server,
        "127.0.0.1",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            files.ca_file.display(),
            files.client_cert.display(),
            files.client_key.display()
        ),
    );
    let (ssl, client_dn) = ssl_of(&database).await.expect("connects");
    assert!(ssl);
    let client_dn = client_dn.expect("the server saw a client certificate");
    assert!(client_dn.contains("delayq test client"), "{client_dn}");
}
