//! `GET /v1/openapi.json` against the router it describes: every route the router serves is
//! an operation of the document and the other way round, the document passes an independent
//! validator (PyPI's `openapi-spec-validator`), and it sits behind the token like all of /v1.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use support::{config, options, producer, redis, serve, Api};

/// The methods a document can list for a route (HEAD is implied by GET in both axum and
/// OpenAPI clients, so it is left out of the comparison).
const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// The routes an `axum::Router` serves, as `(method, path)`, read from its `Debug` output:
/// axum has no public list of routes, and its `Debug` prints each route id with its path
/// (`Node { paths: {RouteId(3): "/v1/queues", ..} }`) and each method router with every
/// method's endpoint (`get: Route`, `put: None`, ...). Only the main path router counts
/// (not the fallbacks, nor axum's own `__private__axum` routes for a nested fallback); a
/// route that is a bare service has no methods to read and shows up as `("*", path)`.
fn served_routes(router: &axum::Router) -> BTreeSet<(String, String)> {
    let text = format!("{router:?}");
    let main = text
        .split("fallback_router:")
        .next()
        .expect("split yields at least one part");
    let (routes, node) = main
        .split_once("node: Node { paths: {")
        .unwrap_or_else(|| panic!("axum's Router Debug changed; adapt served_routes: {main}"));
    let mut paths = std::collections::BTreeMap::new();
    for entry in node.split("RouteId(").skip(1) {
        let (id, rest) = entry.split_once("): \"").expect("RouteId(N): \"path\"");
        let path = rest.split('"').next().expect("a quoted path");
        paths.insert(id.to_owned(), path.to_owned());
    }
    let mut served = BTreeSet::new();
    for entry in routes.split("RouteId(").skip(1) {
        let (id, endpoint) = entry.split_once("): ").expect("RouteId(N): endpoint");
        let path = paths
            .get(id)
            .unwrap_or_else(|| panic!("route {id} has no path in {node}"));
        if path.contains("__private__axum") {
            continue;
        }
        if !endpoint.starts_with("MethodRouter(") {
            served.insert(("*".to_owned(), path.clone()));
            continue;
        }
        for method in METHODS {
            let field = format!(" {method}: ");
            let value = endpoint
                .split_once(&field)
                .unwrap_or_else(|| panic!("no {method} field in {endpoint}"))
                .1;
            if !value.starts_with("None") {
                served.insert((method.to_owned(), path.clone()));
            }
        }
    }
    assert!(
        served.len() > 10,
        "axum's Router Debug changed; served_routes found only {served:?} in {text}"
    );
    served
}

/// The `(method, path)` of every operation of the document.
fn documented_routes(document: &Value) -> BTreeSet<(String, String)> {
    let paths = document["paths"].as_object().expect("paths is an object");
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        let item = item.as_object().expect("a path item is an object");
        for method in item.keys() {
            if METHODS.contains(&method.as_str()) {
                documented.insert((method.clone(), path.clone()));
            }
        }
    }
    documented
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_of_the_router_is_in_the_document() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let served = served_routes(&delayq_http::router(scheduler.clone(), options(&scheduler)));
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let document = api.ok("/v1/openapi.json").await;
    let documented = documented_routes(&document);

    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "routes the router serves but the OpenAPI document lacks (register them with \
         utoipa_axum::routes! and a #[utoipa::path] on the handler): {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "operations of the document the router does not serve: {unserved:?}"
    );
    for route in [
        ("put", "/v1/queues/{queue}/tasks/{id}"),
        ("post", "/v1/queues/{queue}/tasks"),
        ("get", "/v1/openapi.json"),
        ("get", "/healthz"),
    ] {
        assert!(
            served.contains(&(route.0.to_owned(), route.1.to_owned())),
            "{route:?} in {served:?}"
        );
    }
}

/// The validator to run: `DELAYQ_OPENAPI_VALIDATOR`, else `openapi-spec-validator` on PATH.
fn validator() -> PathBuf {
    if let Some(path) = std::env::var_os("DELAYQ_OPENAPI_VALIDATOR") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("openapi-spec-validator"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "openapi-spec-validator not found: `python3 -m venv V && V/bin/pip install \
             openapi-spec-validator==0.9.0`, then set DELAYQ_OPENAPI_VALIDATOR=V/bin/openapi-spec-validator \
             (.ci/run does this)"
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_passes_an_independent_openapi_validator() {
    let validator = validator();
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let document = api.ok("/v1/openapi.json").await;
    assert_eq!(document["openapi"], "3.1.0", "{document}");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, document.to_string()).expect("write the document");
    let output = Command::new(&validator)
        .arg("--schema")
        .arg("3.1")
        .arg(&file)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", validator.display()));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{} refused it: {said}",
        validator.display()
    );
    assert!(said.contains("OK"), "{said}");

    // The validator is not a rubber stamp: a document with a dangling reference fails.
    let mut broken = document.clone();
    broken["paths"]["/healthz"]["get"]["responses"]["200"] =
        serde_json::json!({"$ref": "#/components/responses/Nowhere"});
    std::fs::write(&file, broken.to_string()).expect("write the broken document");
    let output = Command::new(&validator)
        .arg(&file)
        .output()
        .expect("run the validator");
    assert!(!output.status.success(), "a dangling $ref passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_bodies_parameters_errors_and_the_token() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let mut guarded = options(&scheduler);
    guarded.token = Some("s3cret".to_owned());
    let api = Api::new(serve(&scheduler, guarded).await);

    // Behind the token like the rest of /v1.
    let (status, refused) = api.get("/v1/openapi.json").await;
    assert_eq!(status, 401, "{refused}");
    let document = api.with_token("s3cret").ok("/v1/openapi.json").await;

    let schemes = &document["components"]["securitySchemes"];
    assert_eq!(
        schemes[delayq_http::BEARER_SCHEME]["type"],
        "http",
        "{schemes}"
    );
    assert_eq!(schemes[delayq_http::BEARER_SCHEME]["scheme"], "bearer");
    let error = &document["components"]["schemas"]["ErrorBody"];
    assert_eq!(error["required"], serde_json::json!(["error"]), "{error}");
    assert_eq!(error["properties"]["error"]["type"], "string");

    let mut operation_ids = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let id = operation["operationId"].as_str().expect("an operationId");
            assert!(
                operation_ids.insert(id.to_owned()),
                "operationId {id} twice"
            );
            let statuses: Vec<&String> = operation["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .collect();
            let security = &operation["security"];
            if path.starts_with("/v1/") {
                assert_eq!(
                    security,
                    &serde_json::json!([{ "bearer": [] }]),
                    "{method} {path}"
                );
                assert!(statuses.contains(&&"401".to_owned()), "{method} {path}");
                assert_eq!(
                    statuses.contains(&&"403".to_owned()),
                    method != "get",
                    "403 on the changes only: {method} {path}"
                );
            } else {
                assert_eq!(security, &serde_json::json!([]), "{method} {path} is open");
            }
            for status in statuses {
                let response = &operation["responses"][status];
                if status.starts_with('4') || (status == "503" && path.starts_with("/v1/")) {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{status} of {method} {path}"
                    );
                }
            }
        }
    }

    let put = &document["paths"]["/v1/queues/{queue}/tasks/{id}"]["put"];
    let parameters: Vec<&str> = put["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|parameter| parameter["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(parameters, ["queue", "id", "traceparent"], "{put}");
    for status in ["200", "400", "401", "403", "413", "503"] {
        assert!(put["responses"].get(status).is_some(), "{status} in {put}");
    }
    let schemas = &document["components"]["schemas"];
    let body = &schemas["TaskBody"]["properties"];
    for field in ["delay_ms", "due_ms", "in", "at", "payload", "mode"] {
        assert!(body.get(field).is_some(), "{field} in {body}");
    }
    assert_eq!(schemas["TaskBody"]["additionalProperties"], false);
    assert_eq!(body["due_ms"]["minimum"], 100_000_000_000u64, "{body}");
    let item = &schemas["BulkTask"];
    assert_eq!(item["required"], serde_json::json!(["id"]), "{item}");
    assert_eq!(item["additionalProperties"], false, "{item}");
    assert_eq!(item["properties"]["id"]["maxLength"], 512, "{item}");
    assert_eq!(schemas["RecurringBody"]["additionalProperties"], false);
    assert_eq!(
        schemas["RecurringBody"]["required"],
        serde_json::json!(["queue"])
    );
    let queue = put["parameters"][0]["schema"].clone();
    assert_eq!(queue["pattern"], "^[A-Za-z0-9_.-]{1,64}$", "{queue}");
    assert_eq!(queue["maxLength"], 64, "{queue}");
    let links = &put["responses"]["200"]["links"];
    assert_eq!(links["GetTask"]["operationId"], "get_task", "{links}");
    assert_eq!(
        links["GetTask"]["parameters"]["id"], "$response.body#/id",
        "{links}"
    );
    let bulk = &document["paths"]["/v1/queues/{queue}/tasks"]["post"]["requestBody"];
    let bulk_schema = &bulk["content"]["application/json"]["schema"];
    assert_eq!(bulk_schema["type"], "array", "{bulk}");
    assert_eq!(
        bulk_schema["items"]["$ref"],
        "#/components/schemas/BulkTask"
    );
    assert_eq!(bulk_schema["maxItems"], 10_000, "{bulk_schema}");
    let recurring = &document["paths"]["/v1/recurring/{name}"]["put"]["requestBody"];
    assert_eq!(
        recurring["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/RecurringBody",
        "{recurring}"
    );
    for listing in ["pending", "dead"] {
        let get = &document["paths"][format!("/v1/queues/{{queue}}/{listing}")]["get"];
        let limit = get["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|parameter| parameter["name"] == "limit")
            .unwrap_or_else(|| panic!("limit in {get}"));
        assert_eq!(limit["in"], "query", "{limit}");
        assert_eq!(limit["schema"]["maximum"], 1000, "{limit}");
        let listed = get["responses"]["200"]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("a 200 description in {get}"));
        assert!(
            listed.contains("payload_truncated") && listed.contains("payload_bytes"),
            "{listed}"
        );
    }
    let keys = &document["paths"]["/v1/queues/{queue}/keys"]["get"];
    let limit = keys["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|parameter| parameter["name"] == "limit")
        .unwrap_or_else(|| panic!("limit in {keys}"));
    assert_eq!(limit["in"], "query", "{limit}");
    assert_eq!(limit["schema"]["minimum"], 1, "{limit}");
    assert_eq!(limit["schema"]["maximum"], 1000, "{limit}");
    assert_eq!(
        keys["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/HeldKeys",
        "{keys}"
    );
    assert!(keys["responses"].get("400").is_some(), "{keys}");
    assert_eq!(
        schemas["HeldKeys"]["items"]["$ref"],
        "#/components/schemas/HeldKey"
    );
    assert_eq!(
        schemas["HeldKey"]["required"],
        serde_json::json!([
            "key",
            "longest_wait_ms",
            "oldest_due_ms",
            "queue",
            "running",
            "waiting"
        ]),
        "{}",
        schemas["HeldKey"]
    );
    let task = &document["paths"]["/v1/queues/{queue}/tasks/{id}"]["get"]["responses"];
    assert!(task.get("404").is_some(), "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_document_requires_no_security() {
    let server = redis();
    let config = config(&server.url());
    let scheduler = producer(&config).await;
    let api = Api::new(serve(&scheduler, options(&scheduler)).await);
    let document = api.ok("/v1/openapi.json").await;
    assert!(
        document["components"].get("securitySchemes").is_none(),
        "{}",
        document["components"]
    );
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            assert_eq!(
                operation["security"],
                serde_json::json!([]),
                "{method} {path}"
            );
            assert!(
                operation["responses"].get("401").is_none(),
                "no 401 without a token: {method} {path}"
            );
            assert!(
                operation["responses"].get("421").is_some(),
                "the Host guard's 421: {method} {path}"
            );
        }
    }
}
