//! The deployment recipes of `deploy/`, checked by the tools their platforms use and against
//! delayq's own configuration, so that a wrong probe path, a grace period shorter than the
//! drain or a root user fails here and not in production:
//!
//! - `deploy/kubernetes/`: every manifest passes `kubernetes-validate --strict` (PyPI, the
//!   Kubernetes API's own schemas; found through `DELAYQ_KUBERNETES_VALIDATE`, installed by
//!   `cargo xtask setup`); the Deployment's probes, port, grace period, user, Secret and
//!   ConfigMap agree with the ConfigMap's cluster.yaml as delayq loads it; and a node started
//!   with exactly that configuration and the Deployment's arguments answers the probe paths
//!   and drains within the grace period.
//! - `deploy/systemd/delayq.service`: `systemd-analyze verify` accepts it without a warning,
//!   and it stops the node with SIGTERM and waits longer than the drain.
//! - `deploy/Containerfile`: container registries cannot be reached from the test machines,
//!   so the image is not built here; its recipe is checked as text (a build stage, a non-root
//!   final user, `ENTRYPOINT ["delayq"]`, the exposed port).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use delayq::config::Config;
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

fn yaml(path: &str) -> Value {
    let path = deploy(path);
    serde_saphyr::from_str(&read(&path))
        .unwrap_or_else(|error| panic!("{} is not YAML: {error}", path.display()))
}

/// The manifests `kustomization.yaml` applies (and nothing else in the folder).
fn manifests() -> Vec<String> {
    let kustomization = yaml("kubernetes/kustomization.yaml");
    let listed: Vec<String> = kustomization["resources"]
        .as_array()
        .expect("kustomization.yaml lists resources")
        .iter()
        .map(|name| name.as_str().expect("a resource is a file name").to_owned())
        .collect();
    let mut present: Vec<String> = std::fs::read_dir(deploy("kubernetes"))
        .expect("read deploy/kubernetes")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml") && name != "kustomization.yaml")
        .collect();
    present.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        sorted, present,
        "kustomization.yaml must list every manifest of deploy/kubernetes"
    );
    listed
}

fn kubernetes_validate() -> PathBuf {
    std::env::var_os("DELAYQ_KUBERNETES_VALIDATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "DELAYQ_KUBERNETES_VALIDATE is not set: run `cargo xtask setup`, then \
             `eval \"$(cargo xtask env)\"` (or run the suite with `cargo xtask test`)"
            )
        })
}

fn validate(files: &[PathBuf]) -> std::process::Output {
    Command::new(kubernetes_validate())
        .arg("--strict")
        .args(files)
        .output()
        .expect("run kubernetes-validate")
}

#[test]
fn the_kubernetes_manifests_pass_the_api_schemas_strictly() {
    let files: Vec<PathBuf> = manifests()
        .iter()
        .map(|name| deploy(&format!("kubernetes/{name}")))
        .collect();
    let output = validate(&files);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "kubernetes-validate --strict refused:\n{said}"
    );
    for name in manifests() {
        assert!(
            said.contains(&format!("{name} passed")),
            "no verdict on {name}:\n{said}"
        );
    }

    // The check is real: a misspelt field of the same Deployment is refused.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let misspelt = dir.path().join("deployment.yaml");
    let text =
        read(&deploy("kubernetes/deployment.yaml")).replace("livenessProbe:", "livenesProbe:");
    std::fs::write(&misspelt, text).expect("write the misspelt copy");
    assert!(
        !validate(&[misspelt]).status.success(),
        "a misspelt field passed --strict"
    );
}

/// The Deployment's one container.
fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("the Deployment has containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    &containers[0]
}

/// The cluster.yaml held by the ConfigMap, loaded by delayq's own loader (an unknown key or a
/// bad value fails here as it would fail the node).
fn configmap_config() -> (String, Config) {
    let configmap = yaml("kubernetes/configmap.yaml");
    let text = configmap["data"]["cluster.yaml"]
        .as_str()
        .expect("the ConfigMap holds cluster.yaml")
        .to_owned();
    let config = Config::from_yaml_str(&text, "deploy/kubernetes/configmap.yaml")
        .unwrap_or_else(|error| panic!("the ConfigMap's cluster.yaml does not load: {error}"));
    (text, config)
}

/// The ConfigMap's `http.listen`.
fn listen_address(config: &Config) -> std::net::SocketAddr {
    let listen = config
        .http
        .listen
        .as_deref()
        .expect("the ConfigMap sets http.listen");
    listen
        .parse()
        .unwrap_or_else(|error| panic!("http.listen {listen:?}: {error}"))
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .expect("the container has args")
        .iter()
        .map(|arg| arg.as_str().expect("an argument is a string").to_owned())
        .collect()
}

#[test]
fn the_deployment_agrees_with_its_configuration() {
    let deployment = yaml("kubernetes/deployment.yaml");
    let (_, config) = configmap_config();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = container(&deployment);

    // Probes: /healthz for liveness (and start-up), /readyz for readiness, on the port the
    // node listens on.
    let listen = listen_address(&config);
    assert!(
        listen.ip().is_unspecified(),
        "http.listen {listen} must take every address of the pod"
    );
    let ports = container["ports"]
        .as_array()
        .expect("the container declares its ports");
    let http = ports
        .iter()
        .find(|port| port["name"] == "http")
        .expect("a port named http");
    assert_eq!(
        http["containerPort"],
        Value::from(listen.port()),
        "containerPort vs http.listen"
    );
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}'s path");
        assert!(
            get["port"] == "http" || get["port"] == listen.port(),
            "{probe}'s port"
        );
    }

    // The grace period covers the drain, leaving the cluster and closing the server.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    let drain = config.engine.shutdown_grace;
    assert!(
        Duration::from_secs(grace) >= drain + Duration::from_secs(10),
        "terminationGracePeriodSeconds {grace} must exceed engine.shutdown_grace {drain:?} by 10 s or more"
    );

    // Not root, no privilege escalation.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let user = pod["securityContext"]["runAsUser"]
        .as_u64()
        .expect("runAsUser");
    assert_ne!(user, 0, "runAsUser");
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert!(
        container["resources"]["requests"].is_object(),
        "resource requests"
    );
    assert!(
        container["resources"]["limits"]["memory"].is_string(),
        "a memory limit"
    );

    // The configuration is the ConfigMap, mounted where --config points.
    let args = args(container);
    let config_at = args
        .iter()
        .position(|arg| arg == "--config")
        .map(|at| &args[at + 1])
        .expect("--config");
    assert!(
        args.iter().any(|arg| arg == "node"),
        "the container runs `delayq node`: {args:?}"
    );
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|mount| Path::new(config_at).starts_with(mount["mountPath"].as_str().unwrap_or("-")))
        .expect("a volume mounted where --config points");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|volume| volume["name"] == mount["name"])
        .expect("the mounted volume");
    let configmap = yaml("kubernetes/configmap.yaml");
    assert_eq!(volume["configMap"]["name"], configmap["metadata"]["name"]);
    assert!(
        config_at.ends_with("/cluster.yaml"),
        "--config {config_at} names the ConfigMap's key"
    );

    // The Secret provides the backend URL and the token, by the names delayq reads.
    let secret = yaml("kubernetes/secret.yaml");
    let from = container["envFrom"].as_array().expect("envFrom");
    assert!(from
        .iter()
        .any(|source| source["secretRef"]["name"] == secret["metadata"]["name"]));
    for key in ["DELAYQ_REDIS_URL", "DELAYQ_HTTP_TOKEN"] {
        assert!(
            secret["stringData"][key].is_string(),
            "the Secret holds {key}"
        );
    }
    let env = container["env"].as_array().expect("env");
    assert!(
        env.iter().any(|var| var["name"] == "DELAYQ_NODE_NAME"
            && var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"),
        "the node is named after its pod"
    );

    // The Service and the budget select the Deployment's pods.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let selects = |selector: &Value| {
        selector
            .as_object()
            .expect("a selector")
            .iter()
            .all(|(key, value)| &labels[key] == value)
    };
    assert!(selects(&deployment["spec"]["selector"]["matchLabels"]));
    let service = yaml("kubernetes/service.yaml");
    assert!(
        selects(&service["spec"]["selector"]),
        "the Service selects the pods"
    );
    assert!(service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .any(|port| port["targetPort"] == "http"));
    let pdb = yaml("kubernetes/pdb.yaml");
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"]),
        "the budget selects the pods"
    );
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let service_name = service["metadata"]["name"]
        .as_str()
        .expect("the Service's name");
    assert!(
        config
            .http
            .allowed_hosts
            .iter()
            .any(|host| host == service_name),
        "http.allowed_hosts names the Service ({service_name}), or requests through it get 421"
    );
}

/// One HTTP/1.1 GET on loopback; the status code, or `None` while nothing listens.
fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}

#[test]
fn a_node_run_as_the_deployment_runs_it_answers_its_probes_and_drains_in_time() {
    let deployment = yaml("kubernetes/deployment.yaml");
    let (text, config) = configmap_config();
    let container = container(&deployment);
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    let redis = delayq_testkit::RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config_path = dir.path().join("cluster.yaml");
    std::fs::write(&config_path, &text).expect("write the ConfigMap's cluster.yaml");

    // The Deployment's arguments, with the mounted path replaced by our copy; the pod's
    // environment (the Secret's URL, the pod's name), and a free port for http.listen.
    let port = delayq_testkit::free_port();
    let args: Vec<String> = args(container)
        .into_iter()
        .map(|arg| {
            if arg.ends_with("/cluster.yaml") {
                config_path.display().to_string()
            } else {
                arg
            }
        })
        .collect();
    let mut command = common::delayq_command(dir.path());
    command
        .args(&args)
        .env("DELAYQ_REDIS_URL", redis.url())
        .env("DELAYQ_HTTP_LISTEN", format!("127.0.0.1:{port}"))
        .env("DELAYQ_NODE_NAME", "delayq-7d9f8-abcde");
    let mut node = common::NodeProcess::spawn("deployment", command);

    let probes = || ["/healthz", "/readyz"].map(|path| (path, get_status(port, path)));
    common::wait_until(
        Duration::from_secs(60),
        "200 from both probe paths",
        || probes().iter().all(|(_, status)| *status == Some(200)),
        || format!("they answer {:?}: {}", probes(), node.stderr_text()),
    );

    // SIGTERM, as the kubelet sends it: the node drains and exits well within the grace period.
    let stopping = Instant::now();
    node.terminate();
    let status = node
        .wait_exit(Duration::from_secs(grace))
        .unwrap_or_else(|| {
            panic!("the node did not exit within terminationGracePeriodSeconds {grace}")
        });
    assert!(
        status.success(),
        "the node exited with {status}: {}",
        node.stderr_text()
    );
    assert!(
        stopping.elapsed() < config.engine.shutdown_grace + Duration::from_secs(10),
        "the drain took {:?}",
        stopping.elapsed()
    );
}

/// `Key=value` lines of the unit's sections (the last value of a key wins, as in systemd).
fn unit_settings(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#') && !line.starts_with('['))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect()
}

fn systemd_verify(unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run systemd-analyze ({error}): run `cargo xtask setup` (package systemd)"
            )
        })
}

#[test]
fn the_systemd_unit_verifies_and_waits_for_the_drain() {
    let text = read(&deploy("systemd/delayq.service"));
    let settings = unit_settings(&text);
    let exec = settings.get("ExecStart").expect("ExecStart");
    let binary = exec
        .split_whitespace()
        .next()
        .expect("ExecStart names the binary");

    // systemd-analyze checks that ExecStart's binary exists: point a copy at the one built.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let copy = dir.path().join("delayq.service");
    std::fs::write(&copy, text.replace(binary, common::DELAYQ)).expect("write the unit's copy");
    let output = systemd_verify(&copy);
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success() && said.trim().is_empty(),
        "systemd-analyze verify:\n{said}"
    );
    // The check is real: a misspelt key is reported.
    std::fs::write(
        &copy,
        text.replace(binary, common::DELAYQ)
            .replace("Restart=", "Restrat="),
    )
    .expect("write the misspelt copy");
    assert!(String::from_utf8_lossy(&systemd_verify(&copy).stderr).contains("Restrat"));

    // The node's own arguments parse (`--config` as the unit passes it, the repository's
    // cluster.yaml standing for /etc/delayq/cluster.yaml).
    let config = Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster.yaml"))
        .expect("the repository's cluster.yaml loads");
    assert!(
        exec.contains(" node"),
        "ExecStart runs `delayq node`: {exec}"
    );
    assert_eq!(
        settings.get("Type").map(String::as_str),
        Some("notify"),
        "the node sends READY=1"
    );
    assert_eq!(
        settings.get("Restart").map(String::as_str),
        Some("on-failure")
    );
    assert_eq!(
        settings.get("KillSignal").map(String::as_str),
        Some("SIGTERM")
    );
    assert_eq!(
        settings.get("KillMode").map(String::as_str),
        Some("mixed"),
        "SIGTERM to the node alone, so an exec handler's children are drained, not killed"
    );
    let stop = settings.get("TimeoutStopSec").expect("TimeoutStopSec");
    let stop = humantime::parse_duration(stop).expect("TimeoutStopSec is a duration");
    assert!(
        stop >= config.engine.shutdown_grace + Duration::from_secs(10),
        "TimeoutStopSec {stop:?} must exceed shutdown_grace {:?} by 10 s or more",
        config.engine.shutdown_grace
    );
    let user_ok = settings.get("DynamicUser").map(String::as_str) == Some("yes")
        || settings
            .get("User")
            .is_some_and(|user| user != "root" && user != "0");
    assert!(user_ok, "the node runs as a non-root or dynamic user");
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
    ] {
        assert_eq!(settings.get(key).map(String::as_str), Some(value), "{key}");
    }
}

#[test]
fn the_containerfile_builds_a_non_root_image_of_the_binary() {
    let text = read(&deploy("Containerfile"));
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let stages: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.starts_with("FROM "))
        .map(|(at, _)| at)
        .collect();
    assert!(stages.len() >= 2, "a multi-stage build");
    assert!(
        lines[stages[0]].ends_with(" AS build"),
        "the first stage is named build"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains("cargo build --release --locked")),
        "a locked release build"
    );
    let last: &[&str] = &lines[*stages.last().expect("a stage")..];
    let users: Vec<&str> = last
        .iter()
        .filter_map(|line| line.strip_prefix("USER "))
        .collect();
    let user = users.last().expect("the final stage sets USER");
    let name = user.split(':').next().unwrap_or_default();
    assert!(name != "root" && name != "0", "the image runs as {user}");
    assert!(last.iter().any(
        |line| line.starts_with("COPY --from=build ") && line.contains("target/release/delayq")
    ));
    assert!(
        last.contains(&r#"ENTRYPOINT ["delayq"]"#),
        "ENTRYPOINT [\"delayq\"]"
    );
    let (_, config) = configmap_config();
    let port = listen_address(&config).port();
    assert!(
        last.contains(&format!("EXPOSE {port}").as_str()),
        "EXPOSE {port}, the ConfigMap's http.listen port"
    );
    assert!(last
        .iter()
        .any(|line| *line == format!("ENV DELAYQ_HTTP_LISTEN=0.0.0.0:{port}")));
    let ignore = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".dockerignore"));
    assert!(
        ignore.lines().any(|line| line.trim() == "target"),
        ".dockerignore keeps target/ out of the context"
    );
}
