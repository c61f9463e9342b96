//! `cargo xtask`: delayq's developer tasks.
//!
//! - `cargo xtask test [ARGS...]`: the README's test command. Finds or installs what the tests
//!   need (see [`needs`]), then runs `cargo test --workspace --locked ARGS...` with the tools'
//!   locations in the environment.
//! - `cargo xtask setup`: only the finding and installing.
//! - `cargo xtask env`: the environment the tests would get, as `export` lines, so that one
//!   test can be run by hand: `eval "$(cargo xtask env)"; cargo test --test e2e_dashboard`.
//!
//! Installing from the OS packages needs `apt-get` and root (or `sudo` without a password);
//! where neither is there, the task names the packages in one line and stops. The PyPI tools go
//! into a virtual environment under `$DELAYQ_TOOLS_DIR` (default `target/tools` of this
//! checkout), so nothing outside the checkout is written but the OS packages.

mod needs;
mod setup;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest: Vec<String> = args.collect();
    let outcome = match task.as_deref() {
        Some("test") => setup::prepare().and_then(|env| setup::run_tests(&env, &rest)),
        Some("setup") => setup::prepare().map(|_| ExitCode::SUCCESS),
        Some("env") => setup::prepare_quietly().map(|env| {
            for (name, value) in env.variables() {
                // The values are paths of this machine; quote them for the shell.
                let quoted = value.replace('\'', r"'\''");
                let line = format!("export {name}='{quoted}'");
                setup::say_out(&line);
            }
            ExitCode::SUCCESS
        }),
        None | Some("help" | "--help" | "-h") => {
            setup::say(USAGE);
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => {
            setup::say(&format!("unknown task {other:?}\n\n{USAGE}"));
            Ok(ExitCode::from(2))
        }
    };
    outcome.unwrap_or_else(|problem| {
        setup::say(&format!("xtask: {problem}"));
        ExitCode::FAILURE
    })
}

const USAGE: &str = "usage: cargo xtask <task>
  test [ARGS...]   install what the tests need when missing, then cargo test --workspace --locked ARGS...
  setup            only install what the tests need
  env              print the tests' environment as export lines (eval \"$(cargo xtask env)\")";
