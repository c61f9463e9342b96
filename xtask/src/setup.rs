//! Finding and installing the tests' needs, and running the suite with them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::needs::{self, Provides, OS_NEEDS, PYTHON_TOOLS};

/// The environment handed to the tests: one variable per tool.
pub struct TestEnv {
    variables: Vec<(String, String)>,
}

impl TestEnv {
    /// The variables, in the table's order.
    pub fn variables(&self) -> impl Iterator<Item = (&str, &str)> {
        self.variables
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

/// Writes one line to stderr (the task's own messages never mix with the tests' stdout).
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Writes one line to stdout (for `cargo xtask env`).
pub fn say_out(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Finds or installs everything, telling what it does.
pub fn prepare() -> Result<TestEnv, String> {
    prepare_with(true)
}

/// As [`prepare`], but only problems and installs are told.
pub fn prepare_quietly() -> Result<TestEnv, String> {
    prepare_with(false)
}

fn prepare_with(verbose: bool) -> Result<TestEnv, String> {
    install_os_packages(verbose)?;
    let mut variables = Vec::new();
    if let Some(chromium) = needs::CHROMIUM.find() {
        variables.push(("DELAYQ_CHROMIUM".to_owned(), chromium));
    }
    if let Some(bin) = needs::postgres_bin() {
        variables.push(("DELAYQ_PG_BIN".to_owned(), bin.display().to_string()));
    }
    let venv = tools_dir()?.join("venv");
    install_python_tools(&venv, verbose)?;
    for tool in PYTHON_TOOLS {
        let path = match tool.provides {
            Provides::Executable(name) => venv.join("bin").join(name),
            Provides::Module(_) => venv.join("bin").join("python"),
        };
        variables.push((tool.env.to_owned(), path.display().to_string()));
    }
    Ok(TestEnv { variables })
}

/// `$DELAYQ_TOOLS_DIR`, else `target/tools` of the workspace this xtask was built in.
fn tools_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("DELAYQ_TOOLS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("the xtask crate has no parent directory")?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), PathBuf::from);
    Ok(target.join("tools"))
}

fn install_os_packages(verbose: bool) -> Result<(), String> {
    let mut packages: Vec<&str> = Vec::new();
    for need in OS_NEEDS {
        match need.probe.find() {
            Some(found) if verbose => say(&format!("found {}: {found}", need.what)),
            Some(_) => {}
            None => {
                say(&format!(
                    "missing {} (package {})",
                    need.what,
                    need.packages.join(" ")
                ));
                packages.extend(need.packages);
            }
        }
    }
    if packages.is_empty() {
        return Ok(());
    }
    let hint = format!(
        "install them and run again: sudo apt-get install -y {}",
        packages.join(" ")
    );
    if needs::on_path("apt-get").is_none() {
        return Err(format!("no apt-get on this machine; {hint}"));
    }
    let as_root = is_root();
    let sudo_works = !as_root
        && needs::on_path("sudo").is_some()
        && quiet_status(Command::new("sudo").args(["-n", "true"]));
    if !as_root && !sudo_works {
        return Err(format!("not root and no password-less sudo; {hint}"));
    }
    say(&format!(
        "installing from the OS packages: {}",
        packages.join(" ")
    ));
    let apt = |args: &[&str]| {
        let mut command = if as_root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    // A failed update leaves the old lists, which may still do.
    let _ = apt(&["update", "-qq"]).status();
    let mut install = apt(&["install", "-y", "-qq"]);
    install.args(&packages);
    if !install.status().is_ok_and(|status| status.success()) {
        return Err(format!("apt-get install failed; {hint}"));
    }
    let still: Vec<&str> = OS_NEEDS
        .iter()
        .filter(|need| need.probe.find().is_none())
        .map(|need| need.what)
        .collect();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "still missing after apt-get install: {}",
            still.join(", ")
        ))
    }
}

fn install_python_tools(venv: &Path, verbose: bool) -> Result<(), String> {
    let python = venv.join("bin").join("python");
    let stamp = venv.join("delayq-requirements.txt");
    let wanted: String = PYTHON_TOOLS
        .iter()
        .map(|tool| format!("{}\n", tool.requirement))
        .collect();
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|had| had == wanted) {
        if verbose {
            say(&format!("found the PyPI tools in {}", venv.display()));
        }
        return Ok(());
    }
    say(&format!(
        "installing from PyPI into {}: {}",
        venv.display(),
        wanted.trim().replace('\n', " ")
    ));
    if !python.is_file() {
        let created = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(venv)
            .status();
        if !created.is_ok_and(|status| status.success()) {
            return Err(format!("python3 -m venv {} failed", venv.display()));
        }
    }
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    pip.args(PYTHON_TOOLS.iter().map(|tool| tool.requirement));
    if !pip.status().is_ok_and(|status| status.success()) {
        return Err(format!("pip install into {} failed", venv.display()));
    }
    for tool in PYTHON_TOOLS {
        let ok = match tool.provides {
            Provides::Executable(name) => venv.join("bin").join(name).is_file(),
            Provides::Module(module) => {
                quiet_status(Command::new(&python).args(["-c", &format!("import {module}")]))
            }
        };
        if !ok {
            return Err(format!(
                "{} did not install what the tests need",
                tool.requirement
            ));
        }
    }
    std::fs::write(&stamp, wanted).map_err(|error| format!("write {}: {error}", stamp.display()))
}

/// Runs `cargo test --workspace --locked --no-fail-fast ARGS...` with the tools' variables, telling how long it
/// took.
pub fn run_tests(env: &TestEnv, args: &[String]) -> Result<ExitCode, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // --no-fail-fast: one failing test binary does not hide the others' results.
    command
        .args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .args(args);
    for (name, value) in env.variables() {
        command.env(name, value);
    }
    let started = Instant::now();
    let status = command
        .status()
        .map_err(|error| format!("cannot run cargo: {error}"))?;
    let took = started.elapsed().as_secs();
    say(&format!(
        "cargo xtask test: {} in {} min {} s (build and tests)",
        if status.success() { "passed" } else { "FAILED" },
        took / 60,
        took % 60
    ));
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

fn quiet_status(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
