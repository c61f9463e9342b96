//! Prints the OpenAPI document of the HTTP API, as `GET /v1/openapi.json` serves it on a
//! server with `http.token` set (`--no-token`: as on one without), for generating clients:
//!
//! ```text
//! cargo run -q -p delayq-http --example openapi > openapi.json
//! ```

use std::io::Write;

fn main() -> std::io::Result<()> {
    let token = !std::env::args().any(|arg| arg == "--no-token");
    let document = delayq_http::openapi_document(token);
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &document)?;
    writeln!(out)
}
