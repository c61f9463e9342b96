//! Keeping passwords out of logs and error messages.

/// `url` fit for logs and errors: the password in its userinfo replaced by `***` and its query
/// (which may carry `password=`) and fragment removed.
///
/// ```
/// use delayq_redis::redact_url;
/// assert_eq!(redact_url("rediss://app:s3cret@10.0.0.1:6379/0?protocol=3"), "rediss://app:***@10.0.0.1:6379/0");
/// assert_eq!(redact_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let Some(scheme_end) = without_query.find("://").map(|at| at + 3) else {
        return without_query.to_owned();
    };
    let authority_end = without_query[scheme_end..]
        .find('/')
        .map_or(without_query.len(), |at| scheme_end + at);
    let Some(at) = without_query[scheme_end..authority_end].rfind('@') else {
        return without_query.to_owned();
    };
    let userinfo = &without_query[scheme_end..scheme_end + at];
    let shown = match userinfo.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        // `redis://secret@host` is read by redis-rs as a password-only login.
        None => "***".to_owned(),
    };
    format!(
        "{}{shown}{}",
        &without_query[..scheme_end],
        &without_query[scheme_end + at..]
    )
}

/// The password in `url`'s userinfo or `password=` query parameter, if any.
pub(crate) fn url_password(url: &str) -> Option<String> {
    let (before_query, query) = url.split_once('?').unwrap_or((url, ""));
    let from_query = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("password="))
        .map(str::to_owned);
    let scheme_end = before_query.find("://")? + 3;
    let authority_end = before_query[scheme_end..]
        .find('/')
        .map_or(before_query.len(), |at| scheme_end + at);
    let from_userinfo = before_query[scheme_end..authority_end]
        .rfind('@')
        .map(|at| &before_query[scheme_end..scheme_end + at])
        .map(|userinfo| {
            userinfo
                .split_once(':')
                .map_or(userinfo, |(_, password)| password)
        })
        .map(str::to_owned);
    from_userinfo.or(from_query)
}

/// `message` with every one of `secrets` (and its percent-decoded form) replaced by `***`.
pub(crate) fn scrub(message: &str, secrets: &[String]) -> String {
    let mut scrubbed = message.to_owned();
    for secret in secrets.iter().filter(|secret| secret.len() >= 2) {
        scrubbed = scrubbed.replace(secret.as_str(), "***");
        let decoded = percent_decode(secret);
        if decoded != *secret && decoded.len() >= 2 {
            scrubbed = scrubbed.replace(decoded.as_str(), "***");
        }
    }
    scrubbed
}

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
    fn passwords_and_queries_never_show() {
        assert_eq!(
            redact_url("redis://user:secret@host:6380/0"),
            "redis://user:***@host:6380/0"
        );
        assert_eq!(
            redact_url("rediss://:secret@host/1"),
            "rediss://:***@host/1"
        );
        assert_eq!(redact_url("redis://secret@host"), "redis://***@host");
        assert_eq!(
            redact_url("redis://host:1/0?password=secret&protocol=3"),
            "redis://host:1/0"
        );
        assert_eq!(redact_url("redis://a:b@c@host"), "redis://a:***@host");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn passwords_are_found_and_scrubbed() {
        assert_eq!(
            url_password("redis://u:p%40ss@h:1/0").as_deref(),
            Some("p%40ss")
        );
        assert_eq!(
            url_password("redis://h:1/0?password=qq").as_deref(),
            Some("qq")
        );
        assert_eq!(url_password("redis://h:1/0"), None);
        let secrets = vec!["p%40ss".to_owned()];
        assert_eq!(
            scrub("auth p@ss failed, p%40ss", &secrets),
            "auth *** failed, ***"
        );
    }
}
