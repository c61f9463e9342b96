//! Standard Webhooks signing for `--handler http`: the `webhook-id`, `webhook-timestamp` and
//! `webhook-signature` headers, and the secrets they are signed with.
//!
//! A secret is `whsec_` followed by its key in base64 (as the specification and its libraries
//! write them); the key is the decoded bytes. Each request carries one `v1,<signature>` per
//! secret, so a receiver that knows any one of them verifies it, and a secret rotates without
//! a gap: add the new one, move the receivers over, remove the old one. A secret's value never
//! appears in an error, a log line or a `Debug` output: errors name its position only.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use delayq_engine::Task;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The environment variable holding the secrets (separated by spaces or commas).
pub const SECRETS_VARIABLE: &str = "DELAYQ_WEBHOOK_SECRETS";

/// What every secret starts with.
const SECRET_PREFIX: &str = "whsec_";

/// The shortest key accepted, in bytes: the specification asks for 24 to 64.
const MIN_KEY_BYTES: usize = 24;

/// Base64 of the keys, with or without its `=` padding (the libraries accept both).
const KEY_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Where a secret was read, to name it in an error without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretOrigin {
    /// The `position`-th secret (from 1) of [`SECRETS_VARIABLE`].
    Variable {
        /// Its place in the list.
        position: usize,
    },
    /// Line `line` (from 1) of a `--secrets-file`.
    File {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
    },
}

impl fmt::Display for SecretOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretOrigin::Variable { position } => {
                write!(f, "secret {position} of {SECRETS_VARIABLE}")
            }
            SecretOrigin::File { path, line } => {
                write!(f, "line {line} of --secrets-file {}", path.display())
            }
        }
    }
}

/// Why the webhook secrets were refused. No variant holds a secret or a part of one.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// A secret without the `whsec_` prefix.
    #[error("{origin}: a webhook secret is whsec_ followed by its key in base64")]
    NoPrefix {
        /// Which secret.
        origin: SecretOrigin,
    },
    /// The part after `whsec_` is not base64.
    #[error("{origin}: the key after whsec_ is not valid base64 (standard alphabet)")]
    NotBase64 {
        /// Which secret.
        origin: SecretOrigin,
    },
    /// The key is too short to be a safe HMAC key.
    #[error(
        "{origin}: the key is {bytes} bytes, the Standard Webhooks specification asks for at \
         least {MIN_KEY_BYTES} (e.g. whsec_ followed by `openssl rand -base64 32`)"
    )]
    TooShort {
        /// Which secret.
        origin: SecretOrigin,
        /// The key's length.
        bytes: usize,
    },
    /// [`SECRETS_VARIABLE`] is set but lists no secret.
    #[error("{SECRETS_VARIABLE} is set but holds no secret (unset it to send unsigned requests)")]
    EmptyVariable,
    /// A `--secrets-file` without a secret in it.
    #[error("--secrets-file {}: holds no secret (one whsec_... a line)", path.display())]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    /// A `--secrets-file` that cannot be read.
    #[error("--secrets-file {}: cannot read it: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Both sources are set: which one is meant is not ours to guess.
    #[error("both {SECRETS_VARIABLE} and --secrets-file are set: use one of them")]
    BothSources,
}

/// Signs requests with one or more secrets (one `v1,` signature each).
#[derive(Clone)]
pub struct WebhookSigner {
    /// Each secret's HMAC, its key already set up; cloned per request.
    macs: Vec<Hmac<Sha256>>,
}

impl fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSigner")
            .field("secrets", &self.macs.len())
            .finish()
    }
}

impl WebhookSigner {
    /// The signer for [`SECRETS_VARIABLE`]'s value: secrets separated by spaces or commas.
    pub fn from_variable(value: &str) -> Result<Self, SecretError> {
        let secrets = value
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|secret| !secret.is_empty())
            .enumerate()
            .map(|(index, secret)| {
                (
                    SecretOrigin::Variable {
                        position: index + 1,
                    },
                    secret,
                )
            });
        Self::from_secrets(secrets)?.ok_or(SecretError::EmptyVariable)
    }

    /// The signer for a `--secrets-file`: one secret a line; blank lines and lines starting
    /// with `#` are skipped.
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let text = std::fs::read_to_string(path).map_err(|error| SecretError::Unreadable {
            path: path.to_owned(),
            error,
        })?;
        let secrets = text
            .lines()
            .enumerate()
            .map(|(index, line)| (index + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
            .map(|(line, secret)| {
                let origin = SecretOrigin::File {
                    path: path.to_owned(),
                    line,
                };
                (origin, secret)
            });
        Self::from_secrets(secrets)?.ok_or_else(|| SecretError::EmptyFile {
            path: path.to_owned(),
        })
    }

    /// The signer the node's flags and environment ask for: `--secrets-file`, or
    /// [`SECRETS_VARIABLE`] (`variable`, when set); `None` when neither is given.
    pub fn configured(
        file: Option<&Path>,
        variable: Option<&str>,
    ) -> Result<Option<Self>, SecretError> {
        match (file, variable) {
            (Some(_), Some(_)) => Err(SecretError::BothSources),
            (Some(file), None) => Self::from_file(file).map(Some),
            (None, Some(value)) => Self::from_variable(value).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// `None` when `secrets` is empty.
    fn from_secrets<'a>(
        secrets: impl Iterator<Item = (SecretOrigin, &'a str)>,
    ) -> Result<Option<Self>, SecretError> {
        let macs = secrets
            .map(|(origin, secret)| parse_secret(origin, secret))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((!macs.is_empty()).then_some(WebhookSigner { macs }))
    }

    /// How many secrets sign each request.
    pub fn secrets(&self) -> usize {
        self.macs.len()
    }

    /// The `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`
    /// per secret, separated by spaces.
    pub fn sign(&self, webhook_id: &str, timestamp: u64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        let signatures: Vec<String> = self
            .macs
            .iter()
            .map(|mac| {
                let mut mac = mac.clone();
                mac.update(webhook_id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.as_bytes());
                mac.update(b".");
                mac.update(body);
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect();
        signatures.join(" ")
    }
}

/// One `whsec_<base64>` secret's HMAC.
fn parse_secret(origin: SecretOrigin, secret: &str) -> Result<Hmac<Sha256>, SecretError> {
    let Some(encoded) = secret.strip_prefix(SECRET_PREFIX) else {
        return Err(SecretError::NoPrefix { origin });
    };
    // The decode error is not kept: it quotes the offending byte of the secret.
    let Ok(key) = KEY_BASE64.decode(encoded) else {
        return Err(SecretError::NotBase64 { origin });
    };
    if key.len() < MIN_KEY_BYTES {
        return Err(SecretError::TooShort {
            origin,
            bytes: key.len(),
        });
    }
    // HMAC takes a key of any length; this never fails.
    Hmac::<Sha256>::new_from_slice(&key).map_err(|_| SecretError::TooShort {
        origin,
        bytes: key.len(),
    })
}

/// The task's `webhook-id`: `<queue>:<id>:<generation>`, the same on every attempt of one
/// generation (so a receiver drops repeats) and new when the task is scheduled again. The id
/// is percent-encoded where it has a byte that is not visible ASCII, and its `%`s, so the
/// header stays valid whatever the id holds; an id of visible ASCII without `%` is unchanged.
pub fn webhook_id(task: &Task) -> String {
    let mut id = String::with_capacity(task.queue.len() + task.id.len() + 24);
    id.push_str(&task.queue);
    id.push(':');
    for byte in task.id.bytes() {
        if (0x21..=0x7e).contains(&byte) && byte != b'%' {
            id.push(char::from(byte));
        } else {
            id.push_str(&format!("%{byte:02X}"));
        }
    }
    id.push(':');
    id.push_str(&task.generation.to_string());
    id
}

/// The `webhook-timestamp`: this machine's clock in Unix seconds (receivers compare it with
/// theirs, so the wall clock rather than the cluster's).
pub fn webhook_timestamp() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 32-byte key: whsec_ + base64 of the bytes 0..32.
    fn secret(seed: u8) -> String {
        let key: Vec<u8> = (0..32).map(|index| index ^ seed).collect();
        format!("whsec_{}", STANDARD.encode(key))
    }

    fn task(id: &str) -> Task {
        Task {
            queue: "hooks".to_owned(),
            id: id.to_owned(),
            due_ms: 1,
            fired_ms: 2,
            attempt: 1,
            generation: 7,
            payload: bytes::Bytes::new(),
            node: "n".to_owned(),
        }
    }

    #[test]
    fn signs_as_the_specification_example_does() {
        // The example of the Standard Webhooks specification (and of its libraries' tests).
        let signer =
            WebhookSigner::from_variable("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("valid");
        let signature = signer.sign(
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn one_signature_per_secret_in_order() {
        let (old, new) = (secret(1), secret(2));
        let both = WebhookSigner::from_variable(&format!(" {old}, {new}\n")).expect("valid");
        assert_eq!(both.secrets(), 2);
        let only_old = WebhookSigner::from_variable(&old).expect("valid");
        let only_new = WebhookSigner::from_variable(&new).expect("valid");
        let signed = both.sign("q:a:1", 5, b"{}");
        assert_eq!(
            signed,
            format!(
                "{} {}",
                only_old.sign("q:a:1", 5, b"{}"),
                only_new.sign("q:a:1", 5, b"{}")
            )
        );
        assert_ne!(
            only_old.sign("q:a:1", 5, b"{}"),
            only_old.sign("q:a:1", 6, b"{}")
        );
    }

    #[test]
    fn malformed_secrets_are_refused_by_position_without_their_value() {
        let good = secret(3);
        let cases = [
            (
                format!("{good} not-a-secret"),
                "secret 2 of DELAYQ_WEBHOOK_SECRETS",
            ),
            (format!("whsec_!!!!{good}"), "not valid base64"),
            ("whsec_c2hvcnQ=".to_owned(), "the key is 5 bytes"),
        ];
        for (value, expected) in cases {
            let error = WebhookSigner::from_variable(&value)
                .expect_err("refused")
                .to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains(&good[6..]), "{error}");
            assert!(
                !error.contains("not-a-secret") && !error.contains("c2hvcnQ"),
                "{error}"
            );
        }
        assert!(matches!(
            WebhookSigner::from_variable(" , "),
            Err(SecretError::EmptyVariable)
        ));
        assert!(format!("{:?}", WebhookSigner::from_variable(&good)).contains("secrets: 1"));
        assert!(!format!("{:?}", WebhookSigner::from_variable(&good)).contains(&good[6..]));
    }

    #[test]
    fn a_secrets_file_names_the_bad_line() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("secrets");
        let unpadded = secret(4).trim_end_matches('=').to_owned();
        std::fs::write(
            &path,
            format!("# rotating\n{}\n\n{unpadded}\nwhsec_tooshort\n", secret(5)),
        )
        .expect("write");
        let error = WebhookSigner::from_file(&path)
            .expect_err("line 5")
            .to_string();
        assert!(error.contains("line 5 of --secrets-file"), "{error}");
        assert!(!error.contains("tooshort"), "{error}");
        std::fs::write(&path, format!("{}\n{unpadded}\n", secret(5))).expect("write");
        assert_eq!(WebhookSigner::from_file(&path).expect("valid").secrets(), 2);
        std::fs::write(&path, "# none yet\n").expect("write");
        assert!(matches!(
            WebhookSigner::from_file(&path),
            Err(SecretError::EmptyFile { .. })
        ));
        assert!(matches!(
            WebhookSigner::configured(Some(&path), Some("x")),
            Err(SecretError::BothSources)
        ));
        assert!(WebhookSigner::configured(None, None)
            .expect("fine")
            .is_none());
    }

    #[test]
    fn the_webhook_id_is_header_safe_and_unchanged_for_plain_ids() {
        assert_eq!(webhook_id(&task("order-42")), "hooks:order-42:7");
        assert_eq!(webhook_id(&task("a:b")), "hooks:a:b:7");
        assert_eq!(webhook_id(&task("50% off\n")), "hooks:50%25%20off%0A:7");
        assert_eq!(webhook_id(&task("caf\u{e9}")), "hooks:caf%C3%A9:7");
    }
}
