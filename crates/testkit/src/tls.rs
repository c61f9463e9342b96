//! A private TLS-only Redis server with certificates made in-process (`rcgen`: a CA, a
//! server certificate for 127.0.0.1/localhost, a client certificate), `requirepass` for the
//! default user, and an ACL user limited to one key prefix.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::process::{Readiness, RedisProcess};

/// The commands delayq calls, directly or from its scripts (ACL `+` rules). Commands called
/// inside Lua are checked against the calling user's ACL too.
pub const DELAYQ_COMMANDS: &[&str] = &[
    "ping",
    "hello",
    "auth",
    "select",
    "client|setname",
    "role",
    "info",
    "time",
    "wait",
    "evalsha",
    "eval",
    "script|load",
    "script|exists",
    "fcall",
    "function|load",
    "publish",
    "spublish",
    "subscribe",
    "ssubscribe",
    "unsubscribe",
    "sunsubscribe",
    "get",
    "set",
    "del",
    "exists",
    "incr",
    "incrby",
    "hget",
    "hset",
    "hsetnx",
    "hdel",
    "hgetall",
    "hmget",
    "hlen",
    "hexists",
    "hvals",
    "hincrby",
    "pexpire",
    "zadd",
    "zrem",
    "zscore",
    "zmscore",
    "zrange",
    "zrangebyscore",
    "zremrangebyrank",
    "zcard",
    "zcount",
    "scan",
    "unlink",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
    "readonly",
];

/// The PEM files of a test PKI, in a temporary directory.
#[derive(Debug)]
pub struct TlsFiles {
    /// The CA certificate.
    pub ca_file: PathBuf,
    /// The server certificate (SANs 127.0.0.1 and localhost).
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsFiles {
    /// Generates a CA, a server and a client certificate into a new temporary directory.
    ///
    /// # Panics
    /// When generating or writing fails.
    pub fn generate() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("delayq-tls-")
            .tempdir()
            .expect("create a temporary directory for certificates");
        let ca_key = KeyPair::generate().expect("generate the CA key");
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).expect("CA certificate parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "delayq test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("self-sign the CA");

        let leaf = |name: &str, usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("generate a key");
            let mut params =
                CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                    .expect("certificate parameters");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            let cert = params.signed_by(&key, &ca).expect("sign a certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) =
            leaf("delayq test server", ExtendedKeyUsagePurpose::ServerAuth);
        let (client_pem, client_key_pem) =
            leaf("delayq test client", ExtendedKeyUsagePurpose::ClientAuth);

        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write a PEM file");
            path
        };
        TlsFiles {
            ca_file: write("ca.pem", &ca.pem()),
            server_cert: write("server.pem", &server_pem),
            server_key: write("server.key", &server_key_pem),
            client_cert: write("client.pem", &client_pem),
            client_key: write("client.key", &client_key_pem),
            _dir: dir,
        }
    }
}

/// Makes `ring` the process's rustls crypto provider unless one is installed (redis-rs needs
/// a process default for `rediss://`).
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// An ACL user limited to keys and channels under one prefix.
#[derive(Debug, Clone)]
pub struct AclUser {
    /// User name.
    pub name: String,
    /// Password.
    pub password: String,
    /// Keys `~<prefix>:*` and channels `&<prefix>:*`.
    pub prefix: String,
    /// Allowed commands (`+` rules), e.g. [`DELAYQ_COMMANDS`].
    pub commands: Vec<String>,
}

impl AclUser {
    /// `delayq` with a fixed test password, the prefix and [`DELAYQ_COMMANDS`].
    pub fn delayq(prefix: &str) -> Self {
        AclUser {
            name: "delayq".to_owned(),
            password: "delayq-user-secret".to_owned(),
            prefix: prefix.to_owned(),
            commands: DELAYQ_COMMANDS
                .iter()
                .map(|command| (*command).to_owned())
                .collect(),
        }
    }

    /// The `user` directive of redis.conf for this user.
    pub fn directive(&self) -> String {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|command| format!("+{command}"))
            .collect();
        format!(
            "user {} on >{} resetkeys ~{prefix}:* resetchannels &{prefix}:* -@all {}",
            self.name,
            self.password,
            commands.join(" "),
            prefix = self.prefix
        )
    }
}

/// A TLS-only `redis-server` (`port 0`, `tls-port`, client certificates required) with
/// `requirepass` and one prefix-limited ACL user. Killed and removed on drop.
#[derive(Debug)]
pub struct TlsRedis {
    process: RedisProcess,
    files: TlsFiles,
    user: AclUser,
    admin_password: String,
}

impl TlsRedis {
    /// Starts the server with the user [`AclUser::delayq`] for `prefix`.
    ///
    /// # Panics
    /// When the server does not start (e.g. a redis-server built without TLS).
    pub fn start(prefix: &str) -> Self {
        Self::start_with(AclUser::delayq(prefix))
    }

    /// Starts the server with `user`.
    ///
    /// # Panics
    /// As [`TlsRedis::start`].
    pub fn start_with(user: AclUser) -> Self {
        if !crate::redis_server_installed() {
            panic!("{}", crate::INSTALL_HINT);
        }
        let files = TlsFiles::generate();
        let admin_password = "delayq-admin-secret".to_owned();
        let mut last = String::new();
        for _ in 0..5 {
            let port = crate::free_port();
            let config = format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients yes\nrequirepass {admin_password}\n{}\nappendonly no\nsave \"\"\n",
                files.server_cert.display(),
                files.server_key.display(),
                files.ca_file.display(),
                user.directive(),
            );
            match RedisProcess::start("tls-redis", port, &config, false, Readiness::LogLine) {
                Ok(process) => {
                    return TlsRedis {
                        process,
                        files,
                        user,
                        admin_password,
                    }
                }
                Err(error) => last = error,
            }
        }
        panic!("TLS redis-server did not start (does this redis-server support TLS?): {last}");
    }

    /// The TLS port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// `rediss://<user>:<password>@127.0.0.1:<port>/0` for the limited user.
    pub fn user_url(&self) -> String {
        self.url_as(&self.user.name, &self.user.password)
    }

    /// `rediss://<user>:<password>@127.0.0.1:<port>/0` with any login (e.g. a wrong one).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("rediss://{user}:{password}@127.0.0.1:{}/0", self.port())
    }

    /// `rediss://:<requirepass>@127.0.0.1:<port>/0` for the default (admin) user.
    pub fn admin_url(&self) -> String {
        format!(
            "rediss://:{}@127.0.0.1:{}/0",
            self.admin_password,
            self.port()
        )
    }

    /// The certificates and keys.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The limited user.
    pub fn user(&self) -> &AclUser {
        &self.user
    }

    /// The TLS certificates a client needs (CA and client certificate), for redis-rs.
    pub fn client_certificates(&self) -> redis::TlsCertificates {
        ensure_crypto_provider();
        let read = |path: &PathBuf| std::fs::read(path).expect("read a PEM file");
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(&self.files.client_cert),
                client_key: read(&self.files.client_key),
            }),
            root_cert: Some(read(&self.files.ca_file)),
        }
    }

    /// Runs `args` as the admin user over TLS.
    pub fn admin_command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::build_with_tls(self.admin_url(), self.client_certificates())?;
        let mut connection =
            client.get_connection_with_timeout(std::time::Duration::from_secs(2))?;
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command.query(&mut connection)
    }

    /// The server's log tail.
    pub fn log_tail(&self) -> String {
        self.process.log_tail(30)
    }
}
