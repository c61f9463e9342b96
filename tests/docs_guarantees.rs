//! `docs/GUARANTEES.md` cannot drift from the tests, and the repository names no path
//! outside itself.
//!
//! - Every `<path>.rs::<name>` reference of the document must name a file of the repository
//!   that defines `fn <name>` (a test, or a conformance case that the backends' test files
//!   run); a renamed or deleted test fails here, naming the reference and its line. A document
//!   without any reference fails too.
//! - No file of the repository (the files `git ls-files` lists, or without git a walk that
//!   skips `target/` and `.git/`) names a directory of one machine or a file beside the
//!   repository: the checked strings are built below from pieces, so this file does not name
//!   them itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The document whose references are checked, relative to the repository's root.
const DOCUMENT: &str = "docs/GUARANTEES.md";

/// Strings that name a place outside the repository: a machine's home or work directories, a
/// sibling directory of the checkout. `/tmp` is fine (shell snippets use it).
const OUTSIDE: [&str; 3] = [
    concat!("/wo", "rk/"),
    concat!("../sha", "red/"),
    concat!("/ho", "me/"),
];

/// The repository's root (the facade crate's manifest directory).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One `<path>.rs::<name>` reference of the document.
#[derive(Debug, PartialEq)]
struct Reference {
    /// 1-based line of the document.
    line: usize,
    /// The file, relative to the repository's root.
    path: String,
    /// The function the file must define.
    name: String,
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `<path>.rs::<name>` in `text`, in order.
fn references(text: &str) -> Vec<Reference> {
    const MARK: &str = ".rs::";
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find(MARK) {
            let at = from + at;
            let start = line[..at]
                .char_indices()
                .rev()
                .take_while(|&(_, c)| is_path_char(c))
                .last()
                .map_or(at, |(i, _)| i);
            let name_start = at + MARK.len();
            let name_end = line[name_start..]
                .char_indices()
                .find(|&(_, c)| !is_ident_char(c))
                .map_or(line.len(), |(i, _)| name_start + i);
            if start < at && name_start < name_end {
                found.push(Reference {
                    line: index + 1,
                    path: format!("{}.rs", &line[start..at]),
                    name: line[name_start..name_end].to_owned(),
                });
            }
            from = name_start;
        }
    }
    found
}

/// Whether `source` defines `fn <name>` (outside a comment line).
fn defines(source: &str, name: &str) -> bool {
    let needle = format!("fn {name}");
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .any(|line| {
            line.match_indices(&needle).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + needle.len()..].chars().next();
                !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
            })
        })
}

/// What is wrong with `reference`, if anything.
fn problem(reference: &Reference) -> Option<String> {
    let Reference { line, path, name } = reference;
    let at = format!("{DOCUMENT}:{line}: `{path}::{name}`");
    if path.starts_with('/') || path.split('/').any(|part| part == "..") {
        return Some(format!("{at}: the path leaves the repository"));
    }
    let file = root().join(path);
    match std::fs::read_to_string(&file) {
        Err(error) => Some(format!("{at}: cannot read {path}: {error}")),
        Ok(source) if !defines(&source, name) => Some(format!("{at}: {path} has no `fn {name}`")),
        Ok(_) => None,
    }
}

#[test]
fn every_test_the_guarantees_name_exists() {
    let path = root().join(DOCUMENT);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    let references = references(&text);
    assert!(
        !references.is_empty(),
        "{DOCUMENT} names no test as `<path>.rs::<name>`: each guarantee must name the tests that prove it"
    );
    let problems: Vec<String> = references.iter().filter_map(problem).collect();
    assert!(
        problems.is_empty(),
        "{} of the {} test references of {DOCUMENT} are wrong:\n{}",
        problems.len(),
        references.len(),
        problems.join("\n")
    );
}

/// The repository's files, relative to its root: those git tracks, or without git every file
/// outside `target/` and `.git/`.
fn repository_files() -> Vec<PathBuf> {
    let listed = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["ls-files", "-z"])
        .output();
    match listed {
        Ok(output) if output.status.success() => output
            .stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .collect(),
        _ => {
            let mut files = Vec::new();
            walk(root(), Path::new(""), &mut files);
            files
        }
    }
}

fn walk(root: &Path, relative: &Path, files: &mut Vec<PathBuf>) {
    let dir = root.join(relative);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("read directory {}: {error}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|error| panic!("read {}: {error}", dir.display()));
        let name = entry.file_name();
        let path = relative.join(&name);
        let kind = entry
            .file_type()
            .unwrap_or_else(|error| panic!("stat {}: {error}", path.display()));
        if kind.is_dir() {
            if name != "target" && name != ".git" {
                walk(root, &path, files);
            }
        } else if kind.is_file() {
            files.push(path);
        }
    }
}

/// `file:line: text` for every line of `bytes` that names a place outside the repository.
fn outside_paths(file: &Path, bytes: &[u8]) -> Vec<String> {
    if bytes.iter().take(8000).any(|&b| b == 0) {
        return Vec::new(); // binary (an image): not text that names paths
    }
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .enumerate()
        .filter(|(_, line)| OUTSIDE.iter().any(|needle| line.contains(needle)))
        .map(|(index, line)| format!("{}:{}: {}", file.display(), index + 1, line.trim()))
        .collect()
}

#[test]
fn no_file_names_a_path_outside_the_repository() {
    let files = repository_files();
    assert!(
        !files.is_empty(),
        "no file found under {}",
        root().display()
    );
    let mut offenders = Vec::new();
    for file in &files {
        // A file deleted but not yet committed is listed by git and gone: nothing to check.
        let Ok(bytes) = std::fs::read(root().join(file)) else {
            continue;
        };
        offenders.extend(outside_paths(file, &bytes));
    }
    assert!(
        offenders.is_empty(),
        "these lines name a path outside the repository ({}); say it relative to the \
         repository or describe it:\n{}",
        OUTSIDE.join(" "),
        offenders.join("\n")
    );
}

#[test]
fn references_are_read_wherever_they_stand_on_a_line() {
    let text = "intro\n- `crates/a/tests/x.rs::one_case`, `tests/y.rs::two` and\n\
                (src/z.rs::three). Not a reference: `x.rs::` nor `::four`.\n";
    let found = references(text);
    let got: Vec<(usize, &str, &str)> = found
        .iter()
        .map(|r| (r.line, r.path.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (2, "crates/a/tests/x.rs", "one_case"),
            (2, "tests/y.rs", "two"),
            (3, "src/z.rs", "three"),
        ]
    );
}

#[test]
fn a_definition_is_a_whole_name_outside_comments() {
    let source =
        "async fn claims_once() {}\n// fn commented_out() {}\npub async fn longer_name(x: u8) {}\n";
    assert!(defines(source, "claims_once"));
    assert!(defines(source, "longer_name"));
    assert!(
        !defines(source, "longer"),
        "a prefix of a name is not the name"
    );
    assert!(!defines(source, "commented_out"));
    assert!(!defines(source, "claims"));
}

#[test]
fn a_bad_reference_is_named_with_its_line() {
    let missing = Reference {
        line: 7,
        path: "tests/no_such_file.rs".to_owned(),
        name: "anything".to_owned(),
    };
    let message = problem(&missing).expect("a missing file is a problem");
    assert!(
        message.contains(":7: `tests/no_such_file.rs::anything`"),
        "{message}"
    );
    // Built here, so that this file does not define the name it looks for.
    let name = ["a_test", "that_was_renamed"].join("_");
    let renamed = Reference {
        line: 9,
        path: "tests/docs_guarantees.rs".to_owned(),
        name: name.clone(),
    };
    let message = problem(&renamed).expect("a missing function is a problem");
    assert!(
        message.contains(&format!("has no `fn {name}`")),
        "{message}"
    );
    let escaping = Reference {
        line: 1,
        path: "../elsewhere/x.rs".to_owned(),
        name: "f".to_owned(),
    };
    assert!(problem(&escaping).is_some_and(|m| m.contains("leaves the repository")));
}

#[test]
fn outside_paths_are_found_in_text_and_binary_files_are_skipped() {
    let text = format!("ok /tmp/x\nbad {}repo/target\n", OUTSIDE[0]);
    let found = outside_paths(Path::new("a.md"), text.as_bytes());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("a.md:2: bad"), "{found:?}");
    let mut binary = b"\x89PNG\0\0".to_vec();
    binary.extend_from_slice(OUTSIDE[2].as_bytes());
    assert!(outside_paths(Path::new("b.png"), &binary).is_empty());
}
