//! Specifications of the configuration loader.

mod backend;
mod loading;
mod parsing;
mod rules;
mod topology;

use std::path::PathBuf;
use std::time::Duration;

use super::*;

const SRC: &str = "test.yaml";

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// An environment of `pairs`, for the loaders' `get`.
fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name: &str| map.get(name).cloned()
}

fn parse_err(text: &str) -> ConfigError {
    Config::from_yaml_str(text, SRC).expect_err("the text must be rejected")
}

/// A file in the temporary directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("delayq-config-{}-{name}.yaml", std::process::id()));
        std::fs::write(&path, text).expect("write temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
