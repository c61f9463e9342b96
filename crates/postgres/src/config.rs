//! What a node needs to reach its database: the `postgres.*` keys of cluster.yaml, and their
//! translation into the driver's configuration plus the TLS settings this crate handles
//! itself (`sslmode=verify-ca|verify-full`, `sslrootcert`, `sslcert`, `sslkey`, which
//! tokio-postgres does not know).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::tls::{SslMode, TlsSettings};

/// The default `postgres.schema`.
pub const DEFAULT_SCHEMA: &str = "delayq";

/// The default `postgres.url`: the `postgres` database of a server on this machine's
/// standard port, as `psql` without arguments would try (over TCP rather than a socket).
pub const DEFAULT_URL: &str = "postgres://127.0.0.1:5432/postgres";

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1` bytes).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The `postgres.*` settings.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    /// A libpq URI: `postgres://user:password@host:port/db?sslmode=verify-full&...`; several
    /// `host:port` pairs separated by commas with `target_session_attrs=read-write` for a
    /// failover pair.
    pub url: String,
    /// The schema that holds delayq's tables (`postgres.schema`, default `delayq`).
    pub schema: String,
    /// Connections in the pool (`postgres.pool_size`, default 16).
    pub pool_size: usize,
    /// Every statement of a pooled connection is cancelled after this long
    /// (`postgres.statement_timeout`, default 5 s; zero turns it off).
    pub statement_timeout: Duration,
    /// How long one connection attempt (TCP, TLS and login) may take (default 5 s).
    pub connect_timeout: Duration,
    /// `application_name`, seen in `pg_stat_activity` (default `delayq`).
    pub application_name: String,
}

impl std::fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &redact_url(&self.url))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("application_name", &self.application_name)
            .finish()
    }
}

impl Default for PostgresConfig {
    /// The defaults for [`DEFAULT_URL`].
    fn default() -> Self {
        PostgresConfig::new(DEFAULT_URL)
    }
}

impl PostgresConfig {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: 16,
            statement_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            application_name: "delayq".to_owned(),
        }
    }

    /// The same settings with another schema.
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The URL fit for logs and errors ([`redact_url`]).
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Checks every setting; the first bad one is named in the error with its value.
    pub fn validate(&self) -> Result<()> {
        self.resolve().map(|_| ())
    }

    /// The driver's configuration and the TLS settings.
    pub(crate) fn resolve(&self) -> Result<Resolved> {
        Schema::new(&self.schema)?;
        if self.pool_size == 0 {
            return Err(Error::invalid(
                "postgres.pool_size",
                "0",
                "the pool needs at least one connection",
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid(
                "postgres.connect_timeout",
                "0s",
                "a connection attempt needs some time",
            ));
        }
        let (driver_url, tls) = split_tls_params(&self.url)?;
        let mut pg: tokio_postgres::Config = driver_url.parse().map_err(|error| {
            Error::invalid("postgres.url", &self.redacted_url(), &format!("{error}"))
        })?;
        pg.ssl_mode(tls.mode.driver_mode());
        pg.connect_timeout(self.connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name(&self.application_name);
        }
        if !self.statement_timeout.is_zero() {
            let options = format!(
                "{} -c statement_timeout={}",
                pg.get_options().unwrap_or_default(),
                self.statement_timeout.as_millis()
            );
            pg.options(options.trim_start());
        }
        let secrets = pg
            .get_password()
            .map(|password| vec![String::from_utf8_lossy(password).into_owned()])
            .unwrap_or_default();
        Ok(Resolved {
            pg,
            tls,
            target: self.redacted_url(),
            secrets,
        })
    }
}

/// A validated configuration, ready to connect.
#[derive(Clone)]
pub(crate) struct Resolved {
    /// The driver's configuration (hosts, login, `sslmode` as the driver knows it, options).
    pub(crate) pg: tokio_postgres::Config,
    /// How TLS is negotiated and verified.
    pub(crate) tls: TlsSettings,
    /// The URL without password, for messages.
    pub(crate) target: String,
    /// What must never appear in a message.
    pub(crate) secrets: Vec<String>,
}

/// A validated schema name and its quoted form for SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    name: String,
    quoted: String,
}

impl Schema {
    /// `name` if PostgreSQL can hold it as a schema: 1 to 63 bytes, no NUL, not `pg_...`.
    pub fn new(name: &str) -> Result<Self> {
        let reason = if name.is_empty() {
            Some("a schema needs a name")
        } else if name.len() > MAX_IDENTIFIER_BYTES {
            Some("PostgreSQL keeps at most 63 bytes of a name")
        } else if name.contains('\0') {
            Some("a name cannot contain NUL")
        } else if name.to_ascii_lowercase().starts_with("pg_") {
            Some("names starting with pg_ are reserved for the system")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::invalid("postgres.schema", name, reason)),
            None => Ok(Schema {
                name: name.to_owned(),
                quoted: quote_ident(name),
            }),
        }
    }

    /// The name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name quoted for SQL (`"delayq"`).
    pub fn quoted(&self) -> &str {
        &self.quoted
    }

    /// `sql` with every `{schema}` replaced by the quoted name.
    pub fn substitute(&self, sql: &str) -> String {
        sql.replace("{schema}", &self.quoted)
    }
}

/// `name` as a quoted SQL identifier: in double quotes, inner double quotes doubled.
///
/// ```
/// assert_eq!(delayq_postgres::quote_ident("delayq"), "\"delayq\"");
/// assert_eq!(delayq_postgres::quote_ident("a\"b"), "\"a\"\"b\"");
/// ```
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `url` fit for logs and errors: the password of its userinfo replaced by `***`, and the
/// `password` query parameter too.
///
/// ```
/// use delayq_postgres::redact_url;
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db1:5432,db2:5432/app?sslmode=require"),
///     "postgres://app:***@db1:5432,db2:5432/app?sslmode=require"
/// );
/// assert_eq!(redact_url("postgres://db/app?password=s3cret"), "postgres://db/app?password=***");
/// ```
pub fn redact_url(url: &str) -> String {
    let (before_query, query) = match url.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (url, None),
    };
    let mut shown = match before_query.find("://") {
        Some(at) => {
            let scheme_end = at + 3;
            let authority_end = before_query[scheme_end..]
                .find('/')
                .map_or(before_query.len(), |end| scheme_end + end);
            match before_query[scheme_end..authority_end].rfind('@') {
                Some(at_sign) => {
                    let userinfo = &before_query[scheme_end..scheme_end + at_sign];
                    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
                    let masked = if userinfo.contains(':') {
                        format!("{user}:***")
                    } else {
                        user.to_owned()
                    };
                    format!(
                        "{}{masked}{}",
                        &before_query[..scheme_end],
                        &before_query[scheme_end + at_sign..]
                    )
                }
                None => before_query.to_owned(),
            }
        }
        None => before_query.to_owned(),
    };
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("password", _)) => "password=***".to_owned(),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&params.join("&"));
    }
    shown
}

/// Takes this crate's TLS parameters out of `url`, returning the rest for the driver.
fn split_tls_params(url: &str) -> Result<(String, TlsSettings)> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::invalid(
            "postgres.url",
            &redact_url(url),
            "expected a URL postgres://user:password@host:port/database",
        ));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut tls = TlsSettings::default();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(raw);
        match key {
            "sslmode" => {
                tls.mode = SslMode::parse(&value).ok_or_else(|| {
                    Error::invalid(
                        "postgres.url sslmode",
                        &value,
                        "expected disable, prefer, require, verify-ca or verify-full",
                    )
                })?;
            }
            "sslrootcert" => tls.root_cert = Some(value),
            "sslcert" => tls.client_cert = Some(PathBuf::from(value)),
            "sslkey" => tls.client_key = Some(PathBuf::from(value)),
            _ => kept.push(pair),
        }
    }
    tls.check()?;
    let driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((driver_url, tls))
}

/// `%XX` escapes decoded (a path in a query parameter); invalid escapes are kept as they are.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes
            .get(index + 1..index + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[index], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                index += 3;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact_url("postgres://u:p%40ss@h:1/db"),
            "postgres://u:***@h:1/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_url("postgresql://h/db?user=u&password=x&sslmode=require"),
            "postgresql://h/db?user=u&password=***&sslmode=require"
        );
        let config = PostgresConfig::new("postgres://u:hunter2@h:1/db");
        assert!(!format!("{config:?}").contains("hunter2"));
        let error = PostgresConfig::new("postgres://u:hunter2@h:notaport/db")
            .validate()
            .expect_err("a bad port");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn tls_params_are_taken_out_for_the_driver() {
        let (rest, tls) = split_tls_params(
            "postgres://h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&target_session_attrs=read-write",
        )
        .expect("valid");
        assert_eq!(rest, "postgres://h/db?target_session_attrs=read-write");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/tmp/ca.pem"));
        let config = PostgresConfig::new(
            "postgres://u:p@a:1,b:2/db?sslmode=verify-full&sslrootcert=/ca.pem&target_session_attrs=read-write",
        );
        let resolved = config.resolve().expect("valid");
        assert_eq!(resolved.pg.get_hosts().len(), 2);
        assert_eq!(resolved.pg.get_options(), Some("-c statement_timeout=5000"));
    }

    #[test]
    fn bad_settings_name_the_field_and_value() {
        let error = PostgresConfig::new("postgres://h/db?sslmode=sometimes")
            .validate()
            .expect_err("bad sslmode");
        let shown = error.to_string();
        assert!(
            shown.contains("sslmode") && shown.contains("sometimes"),
            "{shown}"
        );
        let error = PostgresConfig::new("postgres://h/db?sslmode=verify-full")
            .validate()
            .expect_err("no root certificate");
        assert!(error.to_string().contains("sslrootcert"), "{error}");
        let error = PostgresConfig::new("redis://h/0")
            .validate()
            .expect_err("not postgres");
        assert!(error.to_string().contains("postgres.url"), "{error}");
        for bad in ["", "pg_catalog", &"x".repeat(64)] {
            let error = PostgresConfig::new("postgres://h/db")
                .with_schema(bad)
                .validate()
                .expect_err("a bad schema");
            assert!(error.to_string().contains("postgres.schema"), "{error}");
        }
        let mut config = PostgresConfig::new("postgres://h/db");
        config.pool_size = 0;
        assert!(config.validate().is_err());
    }

    #[test]
    fn schema_names_are_quoted() {
        let schema = Schema::new("Tenant \"A\"").expect("valid");
        assert_eq!(schema.quoted(), "\"Tenant \"\"A\"\"\"");
        assert_eq!(
            schema.substitute("CREATE TABLE {schema}.meta ()"),
            "CREATE TABLE \"Tenant \"\"A\"\"\".meta ()"
        );
    }
}
