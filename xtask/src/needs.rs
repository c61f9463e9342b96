//! What the test suite needs beyond the Rust toolchain, and how each need is found or installed.
//!
//! Two kinds: programs from the OS packages (found on `PATH` or at a fixed path; installed with
//! `apt-get` on Debian and Ubuntu), and tools from PyPI (installed into one virtual environment
//! under the tools directory, pinned, and handed to the tests through an environment variable).
//! A new test that needs a new tool adds one row here; `.ci/run` and the README's test command
//! both go through this table.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A program or file from the OS packages.
pub struct OsNeed {
    /// What it is, in the words of a message.
    pub what: &'static str,
    /// How to tell it is present.
    pub probe: Probe,
    /// The Debian/Ubuntu packages that provide it.
    pub packages: &'static [&'static str],
}

/// How an [`OsNeed`] is found.
pub enum Probe {
    /// An executable of this name on `PATH`.
    OnPath(&'static str),
    /// A file at this path.
    File(&'static str),
    /// An executable at the first path of a glob-free list that exists, or on `PATH` by the
    /// last element's file name.
    AnyOf(&'static [&'static str]),
    /// `python3 -c <code>` succeeds.
    Python(&'static str),
    /// A PostgreSQL server's `initdb` under `/usr/lib/postgresql/<version>/bin`.
    PostgresServer,
}

/// Where the dashboard tests' browser is looked for (handed to them as `DELAYQ_CHROMIUM`).
pub const CHROMIUM: Probe = Probe::AnyOf(&["/usr/bin/chromium", "chromium"]);

/// The OS-package needs, in the order they are checked.
pub const OS_NEEDS: &[OsNeed] = &[
    OsNeed {
        what: "redis-server",
        probe: Probe::OnPath("redis-server"),
        packages: &["redis-server"],
    },
    OsNeed {
        what: "redis-cli",
        probe: Probe::OnPath("redis-cli"),
        packages: &["redis-tools"],
    },
    OsNeed {
        what: "redis-sentinel",
        probe: Probe::OnPath("redis-sentinel"),
        packages: &["redis-sentinel"],
    },
    OsNeed {
        what: "Chromium (the dashboard tests)",
        probe: CHROMIUM,
        packages: &["chromium"],
    },
    OsNeed {
        what: "the DejaVu fonts (the dashboard's screenshots)",
        probe: Probe::File("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
        packages: &["fonts-dejavu-core"],
    },
    OsNeed {
        what: "systemd-analyze (tests/deploy_recipes.rs verifies the unit file)",
        probe: Probe::OnPath("systemd-analyze"),
        packages: &["systemd"],
    },
    OsNeed {
        what: "python3",
        probe: Probe::OnPath("python3"),
        packages: &["python3"],
    },
    OsNeed {
        what: "python3's venv and ensurepip (the PyPI tools' environment)",
        probe: Probe::Python("import venv, ensurepip"),
        packages: &["python3-venv", "python3-pip"],
    },
    OsNeed {
        what: "a PostgreSQL server (initdb, postgres)",
        probe: Probe::PostgresServer,
        packages: &["postgresql"],
    },
    OsNeed {
        what: "node (20.19 or later) and npm (the TypeScript client's tests)",
        probe: Probe::OnPath("npm"),
        packages: &["nodejs", "npm"],
    },
];

/// A tool from PyPI.
pub struct PythonTool {
    /// The pinned requirement handed to pip.
    pub requirement: &'static str,
    /// What the tests are given: an executable of the environment, or its Python for a library.
    pub provides: Provides,
    /// The environment variable through which the tests find it.
    pub env: &'static str,
}

/// What a [`PythonTool`] hands to the tests.
pub enum Provides {
    /// `<venv>/bin/<name>`.
    Executable(&'static str),
    /// The environment's `python`, which can `import` this module.
    Module(&'static str),
}

/// The PyPI tools, one virtual environment for all.
pub const PYTHON_TOOLS: &[PythonTool] = &[
    // crates/http/tests/openapi.rs: the independent check of GET /v1/openapi.json.
    PythonTool {
        requirement: "openapi-spec-validator==0.9.0",
        provides: Provides::Executable("openapi-spec-validator"),
        env: "DELAYQ_OPENAPI_VALIDATOR",
    },
    // tests/deploy_recipes.rs: the Kubernetes manifests against the API's schemas.
    PythonTool {
        requirement: "kubernetes-validate==1.37.0",
        provides: Provides::Executable("kubernetes-validate"),
        env: "DELAYQ_KUBERNETES_VALIDATE",
    },
    // tests/e2e_webhooks.rs: the signatures of `--handler http` checked by the Standard
    // Webhooks reference library.
    PythonTool {
        requirement: "standardwebhooks==1.1.0",
        provides: Provides::Module("standardwebhooks"),
        env: "DELAYQ_STANDARDWEBHOOKS_PYTHON",
    },
    // crates/http/tests/schemathesis.rs: the server against its own OpenAPI document.
    PythonTool {
        requirement: "schemathesis==4.32.5",
        provides: Provides::Executable("st"),
        env: "DELAYQ_SCHEMATHESIS",
    },
    // clients/generate.sh and crates/http/tests/clients.rs: the generated Python client.
    PythonTool {
        requirement: "openapi-python-client==0.29.1",
        provides: Provides::Executable("openapi-python-client"),
        env: "DELAYQ_OPENAPI_PYTHON_CLIENT",
    },
];

impl Probe {
    /// Where the need was found (a path for programs, a description otherwise), or `None`.
    pub fn find(&self) -> Option<String> {
        match self {
            Probe::OnPath(name) => on_path(name).map(|path| path.display().to_string()),
            Probe::File(path) => Path::new(path).exists().then(|| (*path).to_owned()),
            Probe::AnyOf(candidates) => candidates.iter().find_map(|candidate| {
                if candidate.contains('/') {
                    Path::new(candidate)
                        .exists()
                        .then(|| (*candidate).to_owned())
                } else {
                    on_path(candidate).map(|path| path.display().to_string())
                }
            }),
            Probe::Python(code) => Command::new("python3")
                .args(["-c", code])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .ok()
                .filter(|status| status.success())
                .map(|_| "python3".to_owned()),
            Probe::PostgresServer => postgres_bin().map(|dir| dir.display().to_string()),
        }
    }
}

/// The first executable called `name` on `PATH`.
pub fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The `bin` directory of the newest PostgreSQL server installed from the OS packages.
pub fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_python_tool_is_pinned_and_has_its_own_variable() {
        let mut seen = std::collections::HashSet::new();
        for tool in PYTHON_TOOLS {
            assert!(
                tool.requirement.contains("=="),
                "{} is not pinned",
                tool.requirement
            );
            assert!(
                tool.env.starts_with("DELAYQ_"),
                "{} is not a DELAYQ_ variable",
                tool.env
            );
            assert!(seen.insert(tool.env), "{} is used twice", tool.env);
        }
    }

    #[test]
    fn every_os_need_names_a_package() {
        for need in OS_NEEDS {
            assert!(!need.packages.is_empty(), "{} has no package", need.what);
        }
    }

    #[test]
    fn a_program_that_is_nowhere_is_not_found() {
        assert!(Probe::OnPath("delayq-no-such-program").find().is_none());
        assert!(Probe::File("/nonexistent/delayq").find().is_none());
        assert!(Probe::AnyOf(&["/nonexistent/a", "delayq-no-such-program"])
            .find()
            .is_none());
    }
}
