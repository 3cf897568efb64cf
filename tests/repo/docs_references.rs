//! The documentation names only things that exist.
//!
//! README.md, docs/*.md and BENCHMARKS.md are scanned for the names a reader would type or
//! open, and each one is checked against the repository:
//!
//! - **paths**: every link target (`[text](target)`, relative to the document) and every word
//!   of an inline code span (relative to the repository root) that looks like a relative path
//!   must be a file or directory. A word looks like a path when its first segment is a
//!   top-level entry of the repository (`examples/web.yaml`, `charts/consul-elector`,
//!   `src/plugin/`), or when it contains a `/` and ends with a file extension of this
//!   repository (`.md`, `.yaml`, `.rs`, ...), so that a misspelled directory is caught too.
//!   Not paths: URLs, absolute paths, anything with a placeholder or glob character
//!   (`<name>`, `*`, `{a,b}`, `$VAR`, `...`), build output under `target/`, and label or
//!   annotation keys such as `elector.dev/role` (no extension, first segment not in the repo);
//! - **make targets**: in code (inline or fenced), every word after `make` that is not a flag
//!   or a `VAR=value` must be a target of the Makefile;
//! - **cargo names**: in code, every `cargo` command's `-p`/`--package` must be a workspace
//!   package, its `--bin` a binary and its `--test` an integration test of the package it
//!   selects (`-p`, `--path`, or the root package by default; any package with `--workspace`).
//!
//! Prose is never scanned for commands ("make the..." is English); a `#` comment in a fenced
//! block is dropped before scanning.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The documents checked, relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| {
            path.strip_prefix(ROOT)
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A markdown document split into what is scanned.
#[derive(Debug, Default)]
struct Scanned {
    /// Inline code spans, with the line they start on.
    inline: Vec<(usize, String)>,
    /// Fenced code lines (continuations joined, comments dropped), with their line.
    fenced: Vec<(usize, String)>,
    /// Link targets outside code, with their line.
    links: Vec<(usize, String)>,
}

fn scan(text: &str) -> Scanned {
    let mut scanned = Scanned::default();
    let mut prose = String::new();
    let mut in_fence = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            // Keep prose line numbers aligned.
            prose.push('\n');
            continue;
        }
        if !in_fence {
            prose.push_str(line);
            prose.push('\n');
            continue;
        }
        prose.push('\n');
        let code = strip_comment(line);
        let (start, mut joined) = pending.take().unwrap_or((number, String::new()));
        if let Some(head) = code.trim_end().strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
        } else {
            joined.push_str(&code);
            scanned.fenced.push((start, joined));
        }
    }
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    // Inline code spans may wrap, but not across a blank line.
    let inline = Regex::new(r"`([^`]+)`").unwrap();
    for found in inline.captures_iter(&prose) {
        let span = found.get(1).unwrap();
        if !span.as_str().contains("\n\n") {
            scanned
                .inline
                .push((line_of(span.start()), span.as_str().replace('\n', " ")));
        }
    }
    // Links inside code spans are not links: blank the spans out, keeping offsets and lines.
    let without_code = inline.replace_all(&prose, |c: &regex::Captures| {
        c[0].chars()
            .map(|ch| match ch {
                '\n' => "\n".to_owned(),
                other => "_".repeat(other.len_utf8()),
            })
            .collect::<String>()
    });
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    for found in link.captures_iter(&without_code) {
        let target = found.get(1).unwrap();
        scanned
            .links
            .push((line_of(target.start()), target.as_str().to_owned()));
    }
    scanned
}

/// A fenced line without its shell comment (a `#` at the start or after a blank).
fn strip_comment(line: &str) -> String {
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        if c == '#' && previous.is_whitespace() {
            return line[..i].to_owned();
        }
        previous = c;
    }
    line.to_owned()
}

/// The file extensions of this repository's files, which mark a word as a path.
const EXTENSIONS: [&str; 12] = [
    "md", "yaml", "yml", "rs", "toml", "py", "json", "sh", "tpl", "txt", "lock", "rules",
];

/// The word as a relative path to check, or None when it is not one.
fn as_path(word: &str, top_level: &BTreeSet<String>) -> Option<String> {
    let word = word
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '(' | ')' | ',' | ';'))
        .trim_end_matches(['.', ':']);
    // `path:42` and `path#anchor` name the file.
    let word = Regex::new(r":\d+(-\d+)?$").unwrap().replace(word, "");
    let word = word.split('#').next().unwrap_or_default();
    if word.is_empty()
        || word.contains("://")
        || word.starts_with('/')
        || word.starts_with('-')
        || word.starts_with('~')
        || word.contains("...")
        || word.chars().any(|c| {
            matches!(
                c,
                '<' | '>' | '*' | '?' | '{' | '}' | '$' | '[' | ']' | '=' | '|'
            )
        })
    {
        return None;
    }
    let first = word.split('/').next().unwrap_or_default();
    if first == "target" {
        return None;
    }
    let extension = Path::new(word)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let in_repo = top_level.contains(first) && (word.contains('/') || word.contains('.'));
    let file_like = word.contains('/') && EXTENSIONS.contains(&extension);
    (in_repo || file_like).then(|| word.to_owned())
}

/// The workspace: package name -> (directory, binaries, integration tests).
#[derive(Debug)]
struct Package {
    dir: PathBuf,
    bins: BTreeSet<String>,
    tests: BTreeSet<String>,
}

fn workspace() -> BTreeMap<String, Package> {
    let root = Path::new(ROOT);
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = Regex::new(r#"members\s*=\s*\[([^\]]*)\]"#)
        .unwrap()
        .captures(&manifest)
        .expect("a workspace members list")[1]
        .to_owned();
    let quoted = Regex::new(r#""([^"]+)""#).unwrap();
    let name_field = Regex::new(r#"(?m)^name\s*=\s*"([^"]+)""#).unwrap();
    let mut packages = BTreeMap::new();
    for member in quoted.captures_iter(&members) {
        let dir = root.join(&member[1]);
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a member manifest");
        let package_section = text
            .split("\n[")
            .find(|s| s.starts_with("[package]") || s.starts_with("package]"))
            .expect("a [package] section");
        let name = name_field
            .captures(package_section)
            .expect("a package name")[1]
            .to_owned();
        let autodiscover = |key: &str| !text.contains(&format!("{key} = false"));
        let mut bins = BTreeSet::new();
        let mut tests = BTreeSet::new();
        // Explicit targets: the `name` of each [[bin]] / [[test]] section.
        for section in text.split("\n[[").skip(1) {
            let name = name_field.captures(section).map(|c| c[1].to_owned());
            match (section.split(']').next(), name) {
                (Some("bin"), Some(name)) => {
                    bins.insert(name);
                }
                (Some("test"), Some(name)) => {
                    tests.insert(name);
                }
                _ => {}
            }
        }
        // Cargo's target auto-discovery.
        if autodiscover("autobins") {
            if dir.join("src/main.rs").exists() {
                bins.insert(name.clone());
            }
            bins.extend(target_names(&dir.join("src/bin")));
        }
        if autodiscover("autotests") {
            tests.extend(target_names(&dir.join("tests")));
        }
        packages.insert(name, Package { dir, bins, tests });
    }
    packages
}

/// `x.rs` and `x/main.rs` in `dir`, as target names.
fn target_names(dir: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_owned();
            let is_target = if path.is_dir() {
                path.join("main.rs").exists()
            } else {
                path.extension().is_some_and(|e| e == "rs")
            };
            is_target.then_some(stem)
        })
        .collect()
}

fn make_targets() -> BTreeSet<String> {
    let makefile = std::fs::read_to_string(Path::new(ROOT).join("Makefile")).expect("Makefile");
    Regex::new(
        r"(?m)^([A-Za-z0-9][A-Za-z0-9_.-]*(?:[ \t]+[A-Za-z0-9][A-Za-z0-9_.-]*)*)[ \t]*:([^=]|$)",
    )
    .unwrap()
    .captures_iter(&makefile)
    .flat_map(|c| {
        c[1].split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    })
    .collect()
}

/// What a piece of code names that does not exist.
fn check_commands(
    code: &str,
    make: &BTreeSet<String>,
    packages: &BTreeMap<String, Package>,
    problems: &mut Vec<String>,
) {
    for command in code.split(['&', ';', '|', '(', ')']) {
        let words: Vec<&str> = command.split_whitespace().collect();
        let Some(start) = words.iter().position(|w| *w == "make" || *w == "cargo") else {
            continue;
        };
        let rest = &words[start + 1..];
        if words[start] == "make" {
            for word in rest {
                if word.starts_with('-') || word.contains('=') || is_placeholder(word) {
                    continue;
                }
                if !make.contains(*word) {
                    problems.push(format!("`make {word}`: no such Makefile target"));
                }
            }
            continue;
        }
        // cargo: which package, then which targets.
        let mut package = None;
        let mut workspace = false;
        let mut bins = Vec::new();
        let mut tests = Vec::new();
        let mut words = rest.iter().copied().take_while(|w| *w != "--");
        while let Some(word) = words.next() {
            let (flag, inline) = match word.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
                _ => (word, None),
            };
            let mut value = || inline.or_else(|| words.next());
            match flag {
                "-p" | "--package" => package = value().map(|v| ("name", v)),
                "--path" => package = value().map(|v| ("path", v)),
                "--workspace" | "--all" => workspace = true,
                "--bin" => bins.extend(value()),
                "--test" => tests.extend(value()),
                _ => {}
            }
        }
        let selected: Vec<(&String, &Package)> = match package {
            Some((_, name)) if is_placeholder(name) => continue,
            Some(("name", name)) => match packages.get_key_value(name) {
                Some(found) => vec![found],
                None => {
                    problems.push(format!("`-p {name}`: no such workspace package"));
                    continue;
                }
            },
            Some((_, path)) => {
                let dir = Path::new(ROOT).join(path);
                let found: Vec<_> = packages
                    .iter()
                    .filter(|(_, p)| p.dir.canonicalize().ok() == dir.canonicalize().ok())
                    .collect();
                if found.is_empty() {
                    problems.push(format!("`--path {path}`: no workspace package there"));
                    continue;
                }
                found
            }
            None if workspace => packages.iter().collect(),
            None => packages
                .iter()
                .filter(|(_, p)| p.dir == Path::new(ROOT))
                .collect(),
        };
        let names = selected
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        for bin in bins.into_iter().filter(|b| !is_placeholder(b)) {
            if !selected.iter().any(|(_, p)| p.bins.contains(bin)) {
                problems.push(format!("`--bin {bin}`: not a binary of {names}"));
            }
        }
        // A filter `module::` names a module of the test binaries the command runs.
        let filters = rest
            .iter()
            .filter(|w| w.ends_with("::") && !w.starts_with('-') && !is_placeholder(w));
        for filter in filters {
            let module = filter.split("::").next().unwrap_or_default();
            let found = selected.iter().any(|(_, p)| {
                p.tests
                    .iter()
                    .filter(|t| tests.is_empty() || tests.contains(&t.as_str()))
                    .any(|t| {
                        let dir = p.dir.join("tests").join(t);
                        dir.join(format!("{module}.rs")).exists()
                            || dir.join(module).join("mod.rs").exists()
                    })
            });
            if !found {
                problems.push(format!("`{filter}`: no such test module of {names}"));
            }
        }
        for test in tests.into_iter().filter(|t| !is_placeholder(t)) {
            if !selected.iter().any(|(_, p)| p.tests.contains(test)) {
                problems.push(format!(
                    "`--test {test}`: not an integration test of {names}"
                ));
            }
        }
    }
}

fn is_placeholder(word: &str) -> bool {
    word.chars()
        .any(|c| matches!(c, '<' | '>' | '*' | '$' | '[' | ']' | '{' | '}'))
        || word.contains("...")
}

/// Everything `document` names that does not exist, as `file:line: problem`.
fn problems_in(document: &Path) -> Vec<String> {
    let root = Path::new(ROOT);
    let text = std::fs::read_to_string(root.join(document)).expect("a readable document");
    let top_level: BTreeSet<String> = std::fs::read_dir(root)
        .expect("the root")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name != "target")
        .collect();
    let make = make_targets();
    let packages = workspace();
    let scanned = scan(&text);
    let mut problems = Vec::new();
    let mut report = |line: usize, found: Vec<String>| {
        for problem in found {
            problems.push(format!("{}:{line}: {problem}", document.display()));
        }
    };
    for (line, code) in &scanned.inline {
        let mut found = Vec::new();
        for word in code.split_whitespace() {
            if let Some(path) = as_path(word, &top_level)
                && !root.join(&path).exists()
            {
                found.push(format!("`{path}` does not exist"));
            }
        }
        check_commands(code, &make, &packages, &mut found);
        report(*line, found);
    }
    for (line, code) in &scanned.fenced {
        let mut found = Vec::new();
        check_commands(code, &make, &packages, &mut found);
        report(*line, found);
    }
    let base = document.parent().unwrap_or(Path::new(""));
    for (line, target) in &scanned.links {
        let path = target.split('#').next().unwrap_or_default();
        if path.is_empty() || path.contains(':') || path.starts_with('/') || is_placeholder(path) {
            continue;
        }
        if !root.join(base).join(path).exists() {
            report(
                *line,
                vec![format!("link target `{target}` does not exist")],
            );
        }
    }
    problems
}

#[test]
fn the_docs_name_only_files_targets_binaries_and_tests_that_exist() {
    let mut problems = Vec::new();
    for document in documents() {
        problems.extend(problems_in(&document));
    }
    assert!(
        problems.is_empty(),
        "the documentation names {} things that do not exist:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------
// The extraction itself, on small inputs: what it finds and what it must leave alone.

#[test]
fn paths_are_told_from_urls_keys_and_placeholders() {
    let top: BTreeSet<String> = ["examples", "docs", "charts", "README.md", "src"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    for (word, expected) in [
        ("examples/web.yaml", Some("examples/web.yaml")),
        ("charts/consul-elector", Some("charts/consul-elector")),
        ("src/plugin/", Some("src/plugin/")),
        ("docs/design.md#2-the-safety-rules", Some("docs/design.md")),
        ("src/main.rs:12", Some("src/main.rs")),
        ("(docs/design.md),", Some("docs/design.md")),
        ("README.md", Some("README.md")),
        // A misspelled directory is still a path.
        ("example/web.yaml", Some("example/web.yaml")),
        ("https://example.com/docs/x.md", None),
        ("/tmp/kc", None),
        ("elector.dev/role", None),
        ("kubernetes.io/service-name", None),
        ("examples/<name>.yaml", None),
        ("charts/*/values.yaml", None),
        ("target/release/kubectl-elector", None),
        ("$HOME/x.yaml", None),
        ("--set=x", None),
        ("apps/v1", None),
        ("docs", None),
    ] {
        assert_eq!(as_path(word, &top).as_deref(), expected, "{word}");
    }
}

#[test]
fn code_links_and_commands_are_extracted_from_markdown() {
    let text = "Run `make demo` and see [the design](docs/design.md), not make the prose.\n\
                ```sh\n\
                make lint test   # make nothing-here\n\
                cargo run -p testkit \\\n  --bin sandbox -- --keep\n\
                ```\n\
                A `wrapped\ncode` span and [a site](https://example.com).\n";
    let scanned = scan(text);
    assert_eq!(
        scanned.inline,
        [(1, "make demo".to_owned()), (7, "wrapped code".to_owned())]
    );
    assert_eq!(
        scanned.links,
        [
            (1, "docs/design.md".to_owned()),
            (8, "https://example.com".to_owned())
        ]
    );
    assert_eq!(scanned.fenced.len(), 2, "{:?}", scanned.fenced);
    assert_eq!(scanned.fenced[0], (3, "make lint test   ".to_owned()));
    assert!(scanned.fenced[1].1.contains("--bin sandbox"));
}

#[test]
fn commands_are_checked_against_the_makefile_and_the_workspace() {
    let make: BTreeSet<String> = ["demo", "lint"].into_iter().map(str::to_owned).collect();
    let packages = workspace();
    assert!(packages.contains_key("consul-elector") && packages.contains_key("testkit"));
    let check = |code: &str| {
        let mut problems = Vec::new();
        check_commands(code, &make, &packages, &mut problems);
        problems
    };
    assert!(check("make demo lint VERBOSE=1 -j4").is_empty());
    assert_eq!(check("make demos").len(), 1);
    assert!(check("cargo run -p testkit --bin sandbox -- --keep --bin nothing").is_empty());
    assert!(check("cargo install --path . --bin kubectl-elector").is_empty());
    assert!(check("cargo test --test it --test repo").is_empty());
    assert!(check("cargo test --test it -- --nocapture election_failover:: locks::").is_empty());
    assert_eq!(check("cargo test --test it election_failures::").len(), 1);
    assert_eq!(check("cargo test --test repo election_failover::").len(), 1);
    assert!(check("cargo test -p testkit --test consul_conformance").is_empty());
    assert!(check("cargo run -p <package> --bin <name>").is_empty());
    // The root package is the default: testkit's binaries need `-p testkit`.
    assert_eq!(check("cargo run --bin sandbox").len(), 1);
    assert!(check("cargo run --workspace --bin sandbox").is_empty());
    assert_eq!(check("cargo run -p testkits").len(), 1);
    assert_eq!(check("cargo test --test no_such_test").len(), 1);
    assert_eq!(check("cargo build --bin=kubectl-elektor").len(), 1);
}
