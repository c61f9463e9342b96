//! What every private PostgreSQL server starts from: the server binaries, the account the
//! server runs as, and one data directory made with `initdb` (roles, the test database,
//! `pg_stat_statements`) that each server copies instead of running `initdb` again (about a
//! second each, a tenth of that to copy).
//!
//! Servers and the template live in memory (`/dev/shm`) where it is a writable tmpfs, else in
//! the system's temporary directory: on this project's disks, writing the 30 MB of a data
//! directory took over a second, in memory a tenth of that; and a killed server loses nothing
//! there either, as the files outlive the process.
//!
//! The template is kept in that directory under a name that carries the
//! harness's template revision, the server version and the owner's uid, so it is made once per
//! machine and reused by every test binary; it is built under a private name and renamed into
//! place, so concurrent test binaries never see half of one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The password of the roles `postgres` and `delayq` in the template.
pub(crate) const PASSWORD: &str = "delayq-test-secret";

/// Bump when the template's content changes, so that old templates are not reused.
const TEMPLATE_REVISION: u32 = 2;

/// The one line shown when no server is installed.
pub const POSTGRES_INSTALL_HINT: &str = "PostgreSQL server not found (no DELAYQ_PG_BIN, no /usr/lib/postgresql/<version>/bin/initdb): run `cargo xtask setup` (it installs the Debian package `postgresql`) and `eval \"$(cargo xtask env)\"`";

/// Where the server programs are.
#[derive(Debug, Clone)]
pub(crate) struct Binaries {
    /// The directory of `initdb`, `postgres` and `psql`.
    pub(crate) bin: PathBuf,
    /// Whether the server can preload `pg_stat_statements`.
    pub(crate) pg_stat_statements: bool,
}

impl Binaries {
    /// `DELAYQ_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin`; an error carrying
    /// [`POSTGRES_INSTALL_HINT`] when neither has `initdb` and `postgres`.
    pub(crate) fn locate() -> Result<Self, String> {
        let bin = match std::env::var_os("DELAYQ_PG_BIN") {
            Some(dir) => PathBuf::from(dir),
            None => newest_packaged_bin().ok_or_else(|| POSTGRES_INSTALL_HINT.to_owned())?,
        };
        if !bin.join("initdb").is_file() || !bin.join("postgres").is_file() {
            return Err(format!(
                "no initdb and postgres in {}: {POSTGRES_INSTALL_HINT}",
                bin.display()
            ));
        }
        let pg_stat_statements = pg_config(&bin, "--pkglibdir")
            .is_some_and(|dir| Path::new(&dir).join("pg_stat_statements.so").is_file())
            && pg_config(&bin, "--sharedir").is_some_and(|dir| {
                Path::new(&dir)
                    .join("extension/pg_stat_statements.control")
                    .is_file()
            });
        Ok(Binaries {
            bin,
            pg_stat_statements,
        })
    }

    /// The server's version number, e.g. `15.14`.
    fn version(&self) -> Result<String, String> {
        let output = Command::new(self.bin.join("postgres"))
            .arg("--version")
            .output()
            .map_err(|error| format!("run postgres --version: {error}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        // "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
        text.split_whitespace()
            .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))
            .map(|word| {
                word.chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
                    .collect()
            })
            .ok_or_else(|| format!("no version in {text:?}"))
    }
}

fn newest_packaged_bin() -> Option<PathBuf> {
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

fn pg_config(bin: &Path, flag: &str) -> Option<String> {
    let output = Command::new(bin.join("pg_config"))
        .arg(flag)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The unprivileged account the server runs as when the tests run as root.
#[derive(Debug, Clone)]
pub(crate) struct Account {
    uid: u32,
    gid: u32,
}

impl Account {
    /// `nobody` (from /etc/passwd, else 65534) when running as root, else `None` (the server
    /// runs as the test's own user).
    pub(crate) fn for_server() -> Option<Account> {
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let from_passwd = passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"nobody") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        });
        let (uid, gid) = from_passwd.unwrap_or((65534, 65534));
        Some(Account { uid, gid })
    }

    /// Makes `command` run as this account (std drops the supplementary groups too).
    pub(crate) fn apply(&self, command: &mut Command) {
        std::os::unix::process::CommandExt::uid(command, self.uid);
        std::os::unix::process::CommandExt::gid(command, self.gid);
    }

    /// Gives `root` and everything under it to this account.
    pub(crate) fn own_tree(&self, root: &Path) -> Result<(), String> {
        std::os::unix::fs::lchown(root, Some(self.uid), Some(self.gid))
            .map_err(|error| format!("chown {}: {error}", root.display()))?;
        if root.is_dir() && !root.is_symlink() {
            for entry in std::fs::read_dir(root)
                .map_err(|error| format!("read {}: {error}", root.display()))?
            {
                let entry = entry.map_err(|error| format!("read {}: {error}", root.display()))?;
                self.own_tree(&entry.path())?;
            }
        }
        Ok(())
    }

    fn tag(account: Option<&Account>) -> String {
        match account {
            Some(account) => format!("u{}", account.uid),
            None => format!("u{}", rustix::process::geteuid().as_raw()),
        }
    }
}

/// Where servers and templates are made: `/dev/shm` when it is a writable directory, else the
/// system's temporary directory.
pub(crate) fn scratch_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let writable = shm.is_dir()
            && tempfile::Builder::new()
                .prefix("delayq-probe-")
                .tempdir_in(shm)
                .is_ok();
        if writable {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        }
    })
    .clone()
}

/// The template data directory for `binaries` run as `account`, made now if missing.
pub(crate) fn template(binaries: &Binaries, account: Option<&Account>) -> Result<PathBuf, String> {
    let name = format!(
        "delayq-pg-template-r{TEMPLATE_REVISION}-{}-{}{}",
        binaries.version()?,
        Account::tag(account),
        if binaries.pg_stat_statements {
            "-pss"
        } else {
            ""
        }
    );
    let home = scratch_root().join(name);
    let data = home.join("data");
    if home.join("READY").is_file() {
        return Ok(data);
    }
    let build = tempfile::Builder::new()
        .prefix("delayq-pg-template-build-")
        .tempdir_in(scratch_root())
        .map_err(|error| format!("create a build directory: {error}"))?;
    build_template(binaries, account, build.path())?;
    std::fs::write(build.path().join("READY"), b"")
        .map_err(|error| format!("mark the template ready: {error}"))?;
    let built = build.keep();
    if std::fs::rename(&built, &home).is_err() {
        // Another test binary finished first; use its template.
        let _ = std::fs::remove_dir_all(&built);
        if !home.join("READY").is_file() {
            return Err(format!("cannot move the template to {}", home.display()));
        }
    }
    Ok(data)
}

fn build_template(
    binaries: &Binaries,
    account: Option<&Account>,
    dir: &Path,
) -> Result<(), String> {
    let pwfile = dir.join("pwfile");
    std::fs::write(&pwfile, PASSWORD).map_err(|error| format!("write the pwfile: {error}"))?;
    private_file(&pwfile)?;
    if let Some(account) = account {
        account.own_tree(dir)?;
    }
    let data = dir.join("data");
    let mut initdb = Command::new(binaries.bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "--no-locale"])
        // 1 MB WAL segments instead of 16: less to copy per server.
        .arg("--wal-segsize=1")
        .args(["-E", "UTF8"])
        .arg(format!("--pwfile={}", pwfile.display()));
    run(&mut initdb, account, dir, None)?;
    let mut sql = format!(
        "CREATE ROLE delayq LOGIN PASSWORD '{PASSWORD}'\n\
         CREATE DATABASE {} OWNER delayq\n\
         GRANT pg_read_all_stats TO delayq\n",
        crate::postgres::DATABASE
    );
    single_user(binaries, account, dir, "postgres", &sql)?;
    sql = String::new();
    if binaries.pg_stat_statements {
        sql.push_str("CREATE EXTENSION IF NOT EXISTS pg_stat_statements\n");
    }
    if !sql.is_empty() {
        single_user(binaries, account, dir, crate::postgres::DATABASE, &sql)?;
    }
    std::fs::remove_file(&pwfile).map_err(|error| format!("remove the pwfile: {error}"))
}

/// Runs `sql` (one statement a line) in single-user mode on `database`.
fn single_user(
    binaries: &Binaries,
    account: Option<&Account>,
    dir: &Path,
    database: &str,
    sql: &str,
) -> Result<(), String> {
    let mut postgres = Command::new(binaries.bin.join("postgres"));
    postgres
        .arg("--single")
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-c", "fsync=off", database]);
    let output = run(&mut postgres, account, dir, Some(sql))?;
    if output.contains("ERROR:") {
        return Err(format!("single-user postgres failed on {sql:?}: {output}"));
    }
    Ok(())
}

/// Runs `command` as `account` in `dir` with `input` on its stdin; its output, or an error
/// with it when it fails.
fn run(
    command: &mut Command,
    account: Option<&Account>,
    dir: &Path,
    input: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    command
        .current_dir(dir)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(account) = account {
        account.apply(command);
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("spawn {command:?}: {error}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .map_err(|error| format!("write to {command:?}: {error}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|error| format!("wait for {command:?}: {error}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(format!("{command:?} failed ({}): {text}", output.status))
    }
}

/// Copies the directory `from` to `to` (which must not exist), keeping permissions.
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let metadata =
        std::fs::metadata(from).map_err(|error| format!("read {}: {error}", from.display()))?;
    std::fs::create_dir(to).map_err(|error| format!("create {}: {error}", to.display()))?;
    std::fs::set_permissions(to, metadata.permissions())
        .map_err(|error| format!("chmod {}: {error}", to.display()))?;
    for entry in
        std::fs::read_dir(from).map_err(|error| format!("read {}: {error}", from.display()))?
    {
        let entry = entry.map_err(|error| format!("read {}: {error}", from.display()))?;
        let target = to.join(entry.file_name());
        let kind = entry
            .file_type()
            .map_err(|error| format!("stat {}: {error}", entry.path().display()))?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)
                .map_err(|error| format!("copy {}: {error}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Makes `path` readable by its owner only (PostgreSQL insists on it for a key).
pub(crate) fn private_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|error| format!("chmod {}: {error}", path.display()))
}
