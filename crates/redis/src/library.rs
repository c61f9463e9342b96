//! Redis Functions: one library of Lua functions, defined once per server with
//! `FUNCTION LOAD` and called with `FCALL`, with every function's twin as an `EVALSHA` script
//! for servers without Functions (Redis < 7) or users without the permission.
//!
//! Why: a script sent with `EVALSHA` runs its whole top level on every call, so the shared
//! Lua it needs (a record codec, helpers) is defined again on each one; a library's top level
//! runs once, when it is loaded, and `FCALL` only runs the function.
//!
//! A library's name carries the hash of its code (`<prefix>_<12 hex digits>`), and so do its
//! functions' names (`<library>_<function>`): function names are global on a server, and two
//! releases of one program with different code must be able to run side by side during a
//! rolling upgrade, each calling its own. Since a library of that name can only hold this
//! code, loading it where it exists is a no-op (`FUNCTION LOAD` without `REPLACE`, whose
//! "already exists" answer counts as loaded), which also spares a fleet of nodes starting at
//! once a recompilation per node.

use std::sync::Arc;

use redis::Cmd;

use crate::scripts::Script;

/// A Redis Functions library: its name and the code `FUNCTION LOAD` takes. Cheap to clone.
///
/// ```
/// use delayq_redis::LibraryBuilder;
///
/// let mut builder = LibraryBuilder::new("app", &["local function twice(n) return 2 * n end"]);
/// builder.function("bump", &[], "return redis.call('INCRBY', KEYS[1], twice(ARGV[1]))");
/// let (library, scripts) = builder.build();
/// assert!(library.name().starts_with("app_"));
/// assert_eq!(scripts[0].function(), Some(format!("{}_bump", library.name()).as_str()));
/// ```
#[derive(Debug, Clone)]
pub struct Library {
    inner: Arc<LibraryInner>,
}

#[derive(Debug)]
struct LibraryInner {
    name: String,
    code: String,
    /// The functions' `EVALSHA` twins, for servers without Functions.
    fallbacks: Vec<Script>,
}

impl Library {
    /// The library's name (`<prefix>_<hash>`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The code `FUNCTION LOAD` takes, shebang line included.
    pub fn code(&self) -> &str {
        &self.inner.code
    }

    /// The `EVALSHA` twins of the functions (plain scripts: they know nothing of the library).
    pub(crate) fn fallbacks(&self) -> &[Script] {
        &self.inner.fallbacks
    }

    /// `FUNCTION LOAD <code>`.
    pub(crate) fn load_command(&self) -> Cmd {
        let mut command = redis::cmd("FUNCTION");
        command.arg("LOAD").arg(self.code());
        command
    }
}

/// Builds a [`Library`] and, for each of its functions, the [`Script`] that calls it (with
/// `FCALL`, or as an `EVALSHA` script where Functions are not available).
///
/// A function is the body of a script as `EVALSHA` would run it: it reads `KEYS` and `ARGV`
/// (they are its parameters in the library) and returns its reply. The shared parts are put
/// once at the library's top level, and in front of each fallback script that needs them.
#[derive(Debug)]
pub struct LibraryBuilder {
    prefix: String,
    shared: Vec<String>,
    functions: Vec<Function>,
}

#[derive(Debug)]
struct Function {
    name: String,
    fallback: String,
    body: String,
}

impl LibraryBuilder {
    /// A library named after `prefix`, whose top level holds the `shared` parts (Lua that
    /// only defines local functions and constants: a library's top level may not call Redis).
    pub fn new(prefix: &str, shared: &[&str]) -> Self {
        LibraryBuilder {
            prefix: prefix.to_owned(),
            shared: shared.iter().map(|part| (*part).to_owned()).collect(),
            functions: Vec::new(),
        }
    }

    /// Adds the function `name` with `body`; its fallback script is `parts` (some of the
    /// shared parts, those the body needs) followed by `body`.
    pub fn function(&mut self, name: &str, parts: &[&str], body: &str) -> &mut Self {
        let mut fallback = parts.join("\n");
        fallback.push('\n');
        fallback.push_str(body);
        self.functions.push(Function {
            name: name.to_owned(),
            fallback,
            body: body.to_owned(),
        });
        self
    }

    /// The library, and one [`Script`] per function in the order they were added.
    pub fn build(self) -> (Library, Vec<Script>) {
        // The name is the hash of everything but the name itself.
        let mut hashed = self.shared.join("\n");
        for function in &self.functions {
            hashed.push_str(&format!("\n-- {}\n{}", function.name, function.body));
        }
        let hash = redis::Script::new(&hashed).get_hash().to_owned();
        let name = format!("{}_{}", self.prefix, &hash[..12]);
        let mut code = format!("#!lua name={name}\n{}", self.shared.join("\n"));
        for function in &self.functions {
            code.push_str(&format!(
                "\nredis.register_function('{name}_{}', function(KEYS, ARGV)\n{}\nend)\n",
                function.name, function.body
            ));
        }
        let library = Library {
            inner: Arc::new(LibraryInner {
                name,
                code,
                fallbacks: self
                    .functions
                    .iter()
                    .map(|function| Script::new(&function.fallback))
                    .collect(),
            }),
        };
        let scripts = self
            .functions
            .iter()
            .map(|function| {
                Script::in_library(
                    &function.fallback,
                    format!("{}_{}", library.name(), function.name),
                    library.clone(),
                )
            })
            .collect();
        (library, scripts)
    }
}

/// What a failed call of a function or script asks for before it is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repair {
    /// `NOSCRIPT`: load the script on that master.
    LoadScript,
    /// `ERR Function not found`: load the library on that master (`FUNCTION FLUSH`, a new
    /// master, a replica promoted before the library reached it).
    LoadLibrary,
    /// The server has no Functions (`unknown command 'FCALL'`: Redis < 7) or the user may not
    /// use them (`NOPERM` on `fcall`): call the `EVALSHA` twins from now on.
    UseScripts,
}

/// The repair a server error reply of a call asks for, if any. None of these replies ran the
/// call, so sending it again after the repair never applies it twice.
pub(crate) fn repair_for(error: &redis::ServerError) -> Option<Repair> {
    if error.kind() == Some(redis::ServerErrorKind::NoScript) {
        return Some(Repair::LoadScript);
    }
    let details = error.details().unwrap_or("");
    match error.code() {
        "ERR" if details.starts_with("Function not found") => Some(Repair::LoadLibrary),
        "ERR" if unknown_command(details) => Some(Repair::UseScripts),
        "NOPERM" if details.contains("'fcall'") => Some(Repair::UseScripts),
        _ => None,
    }
}

/// Whether a `FUNCTION LOAD` error says that Functions cannot be used here (Redis < 7, or an
/// ACL user without `+function|load`), so the scripts must do.
pub(crate) fn functions_unavailable(error: &redis::RedisError) -> bool {
    match error.code() {
        Some("ERR") => error.detail().is_some_and(unknown_command),
        Some("NOPERM") => true,
        _ => false,
    }
}

/// Whether a `FUNCTION LOAD` error says the library is there already (which, with the code's
/// hash in its name, means this very code).
pub(crate) fn already_loaded(error: &redis::RedisError) -> bool {
    error.code() == Some("ERR")
        && error.detail().is_some_and(|detail| {
            detail.starts_with("Library") && detail.contains("already exists")
        })
}

/// `unknown command 'FCALL'` (Redis 6.0, 7 with the command renamed away) or
/// `` unknown command `FCALL` `` (Redis 6.2).
fn unknown_command(details: &str) -> bool {
    details.to_ascii_lowercase().starts_with("unknown command")
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn server_error(line: &str) -> redis::ServerError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(error)) => error,
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn replies_that_ask_for_a_repair() {
        let cases = [
            (
                "NOSCRIPT No matching script. Please use EVAL.",
                Some(Repair::LoadScript),
            ),
            ("ERR Function not found", Some(Repair::LoadLibrary)),
            (
                "ERR unknown command 'FCALL', with args beginning with: 'f' '0' ",
                Some(Repair::UseScripts),
            ),
            (
                "ERR unknown command `FCALL`, with args beginning with: `f`, `0`, ",
                Some(Repair::UseScripts),
            ),
            (
                "NOPERM this user has no permissions to run the 'fcall' command",
                Some(Repair::UseScripts),
            ),
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                None,
            ),
            (
                "ERR user_function:4: attempt to index local 'x' (a nil value)",
                None,
            ),
            ("DELAYQ_CORRUPT bad | field x", None),
            (
                "OOM command not allowed when used memory > 'maxmemory'.",
                None,
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(repair_for(&server_error(line)), expected, "{line}");
        }
    }

    #[test]
    fn load_errors_that_mean_scripts_or_already_loaded() {
        let error = |line: &str| redis::RedisError::from(server_error(line));
        assert!(functions_unavailable(&error(
            "ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' "
        )));
        assert!(functions_unavailable(&error(
            "NOPERM this user has no permissions to run the 'function|load' command"
        )));
        assert!(!functions_unavailable(&error(
            "ERR Error compiling function: user_function:3: '=' expected"
        )));
        assert!(already_loaded(&error(
            "ERR Library 'app_0123' already exists"
        )));
        assert!(!already_loaded(&error("ERR Function app_x already exists")));
    }

    #[test]
    fn names_carry_the_hash_of_the_code() {
        let build = |body: &str| {
            let mut builder = LibraryBuilder::new("app", &["local X = 1"]);
            builder.function("f", &[], body);
            builder.build()
        };
        let (one, scripts) = build("return X");
        let (again, _) = build("return X");
        let (other, _) = build("return X + 1");
        assert_eq!(one.name(), again.name());
        assert_ne!(one.name(), other.name());
        assert_eq!(one.name().len(), "app_".len() + 12);
        assert!(one
            .code()
            .starts_with(&format!("#!lua name={}\n", one.name())));
        assert!(one
            .code()
            .contains(&format!("redis.register_function('{}_f'", one.name())));
        assert_eq!(scripts[0].code(), "\nreturn X");
    }
}
