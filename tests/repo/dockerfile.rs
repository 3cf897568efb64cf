//! The `Dockerfile` and `.dockerignore`, checked without Docker (no engine runs where this
//! project is built): a small line-based parser reads the Dockerfile's instructions and the
//! tests assert what a `docker build .` from a clean clone depends on.
//!
//! - multi-stage: a Rust builder and a runtime stage without a shell (no `RUN` there);
//! - every base image is pinned to a tag or digest other than `latest`, and the Rust version
//!   is at least the crate's `rust-version`;
//! - the builder builds only `-p consul-elector --bin consul-elector --release --locked`, never
//!   testkit, and the runtime stage copies exactly the path that build writes;
//! - every path copied from the build context exists in the repository and is not excluded by
//!   `.dockerignore`, which keeps `target/`, `.git` and the tests out;
//! - the runtime stage runs as a numeric non-root user, with the binary as an exec-form
//!   `ENTRYPOINT`, `run` as `CMD`, the admin port exposed and the OCI labels set.
//!
//! `builder_stage_builds_the_operator_from_a_clean_copy` (ignored: it compiles the operator in
//! release mode, minutes) goes further and runs the builder stage's own commands in a scratch
//! directory laid out by its `COPY`s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use consul_elector::cli::Cli;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One instruction, continuation lines joined.
#[derive(Debug, Clone)]
struct Instruction {
    /// Line number of its first line.
    line: usize,
    /// Upper-cased keyword (`FROM`, `RUN`, ...).
    keyword: String,
    /// Everything after the keyword.
    args: String,
}

/// A build stage: its `FROM` and the instructions after it.
#[derive(Debug, Clone)]
struct Stage {
    /// Base image as written (variables not expanded).
    image: String,
    /// `AS <name>`, if any.
    name: Option<String>,
    instructions: Vec<Instruction>,
}

impl Stage {
    fn all<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a Instruction> + 'a {
        self.instructions
            .iter()
            .filter(move |i| i.keyword == keyword)
    }

    fn last(&self, keyword: &str) -> Option<&Instruction> {
        self.instructions.iter().rfind(|i| i.keyword == keyword)
    }
}

struct Dockerfile {
    /// `ARG`s before the first `FROM`, with their defaults.
    global_args: BTreeMap<String, String>,
    stages: Vec<Stage>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|error| panic!("cannot read {path}: {error}"))
}

/// Splits Dockerfile text into instructions: comment lines dropped (also inside a
/// continuation, as Docker does), lines ending in `\` joined with the next.
fn instructions(text: &str) -> Vec<Instruction> {
    let mut result = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_none()) {
            continue;
        }
        let (continues, body) = match trimmed.strip_suffix('\\') {
            Some(body) => (true, body.trim_end()),
            None => (false, trimmed),
        };
        let entry = current.get_or_insert_with(|| (index + 1, String::new()));
        if !entry.1.is_empty() && !body.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(body);
        if !continues {
            let (line, joined) = current.take().expect("an open instruction");
            let (keyword, args) = joined
                .split_once(char::is_whitespace)
                .unwrap_or((&joined, ""));
            result.push(Instruction {
                line,
                keyword: keyword.to_ascii_uppercase(),
                args: args.trim().to_owned(),
            });
        }
    }
    assert!(
        current.is_none(),
        "the Dockerfile ends inside a continuation"
    );
    result
}

fn parse(text: &str) -> Dockerfile {
    let mut global_args = BTreeMap::new();
    let mut stages: Vec<Stage> = Vec::new();
    for instruction in instructions(text) {
        if instruction.keyword == "FROM" {
            let words: Vec<&str> = instruction
                .args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_] => None,
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                _ => panic!(
                    "line {}: cannot read FROM {}",
                    instruction.line, instruction.args
                ),
            };
            stages.push(Stage {
                image: words[0].to_owned(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push(instruction);
        } else {
            assert_eq!(
                instruction.keyword, "ARG",
                "line {}: only ARG may come before the first FROM",
                instruction.line
            );
            let (name, default) = instruction
                .args
                .split_once('=')
                .unwrap_or((&instruction.args, ""));
            global_args.insert(name.to_owned(), default.to_owned());
        }
    }
    Dockerfile {
        global_args,
        stages,
    }
}

fn dockerfile() -> Dockerfile {
    parse(&read("Dockerfile"))
}

impl Dockerfile {
    fn builder(&self) -> &Stage {
        self.stages
            .iter()
            .find(|s| s.name.as_deref() == Some("builder"))
            .expect("a stage named builder")
    }

    fn runtime(&self) -> &Stage {
        self.stages.last().expect("at least one stage")
    }

    /// `text` with `${NAME}` and `$NAME` of the global ARGs replaced by their defaults.
    fn expand(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (name, value) in &self.global_args {
            out = out
                .replace(&format!("${{{name}}}"), value)
                .replace(&format!("${name}"), value);
        }
        assert!(!out.contains('$'), "unexpanded variable in {text:?}");
        out
    }
}

/// The `ARG` of `stage` named `name`, with its default.
fn stage_arg(stage: &Stage, name: &str) -> Option<String> {
    stage.all("ARG").find_map(|i| match i.args.split_once('=') {
        Some((n, default)) if n == name => Some(default.to_owned()),
        None if i.args == name => Some(String::new()),
        _ => None,
    })
}

/// `COPY`'s flags (`--from=builder` -> ("from", "builder")), sources and destination.
fn copy_parts(instruction: &Instruction) -> (BTreeMap<String, String>, Vec<String>, String) {
    let mut flags = BTreeMap::new();
    let mut paths = Vec::new();
    for word in instruction.args.split_whitespace() {
        match word.strip_prefix("--") {
            Some(flag) => {
                let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
                flags.insert(name.to_owned(), value.to_owned());
            }
            None => paths.push(word.to_owned()),
        }
    }
    assert!(
        !instruction.args.starts_with('['),
        "line {}: use the plain COPY form",
        instruction.line
    );
    let destination = paths.pop().expect("COPY has a destination");
    assert!(
        !paths.is_empty(),
        "line {}: COPY has no source",
        instruction.line
    );
    (flags, paths, destination)
}

/// The runtime stage's JSON (exec-form) instruction `keyword`.
fn exec_form(stage: &Stage, keyword: &str) -> Vec<String> {
    let instruction = stage
        .last(keyword)
        .unwrap_or_else(|| panic!("the runtime stage has no {keyword}"));
    serde_json::from_str(&instruction.args).unwrap_or_else(|error| {
        panic!(
            "line {}: {keyword} must be in exec form (a JSON array), not {:?}: {error}",
            instruction.line, instruction.args
        )
    })
}

/// The image's tag (`None` when pinned only by digest or not at all).
fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_component = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last_component.split_once(':').map(|(_, tag)| tag)
}

#[test]
fn it_is_multi_stage_with_a_rust_builder_and_a_distroless_runtime() {
    let file = dockerfile();
    assert!(file.stages.len() >= 2, "the build must be multi-stage");
    let builder = file.builder();
    assert!(
        file.expand(&builder.image).starts_with("rust:"),
        "builder: {}",
        builder.image
    );
    let runtime = file.runtime();
    assert_ne!(runtime.name.as_deref(), Some("builder"));
    assert!(
        runtime.image.starts_with("gcr.io/distroless/")
            || runtime.image.starts_with("cgr.dev/chainguard/"),
        "runtime: {}",
        runtime.image
    );
    // Distroless has no shell: a RUN there could not execute.
    assert_eq!(runtime.all("RUN").count(), 0, "RUN in the runtime stage");
}

#[test]
fn no_base_image_is_latest_or_untagged() {
    let file = dockerfile();
    let stage_names: Vec<&str> = file
        .stages
        .iter()
        .filter_map(|s| s.name.as_deref())
        .collect();
    for stage in &file.stages {
        if stage_names.contains(&stage.image.as_str()) {
            continue;
        }
        let image = file.expand(&stage.image);
        let tag = image_tag(&image);
        assert!(
            image.contains("@sha256:") || tag.is_some(),
            "{image} has neither a tag nor a digest"
        );
        assert_ne!(tag, Some("latest"), "{image} uses latest");
    }
    for stage in &file.stages {
        for copy in stage.all("COPY") {
            if let Some(from) = copy_parts(copy).0.get("from") {
                assert!(
                    stage_names.contains(&from.as_str()),
                    "line {}: COPY --from={from} must name a stage, not an image",
                    copy.line
                );
            }
        }
    }
}

#[test]
fn the_rust_image_is_at_least_the_msrv() {
    let file = dockerfile();
    let image = file.expand(&file.builder().image);
    let tag = image_tag(&image).expect("a tagged rust image");
    let version = |text: &str| -> (u32, u32) {
        let mut parts = text
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    let msrv = env!("CARGO_PKG_RUST_VERSION");
    assert!(
        version(tag) >= version(msrv),
        "rust:{tag} is older than the MSRV {msrv}"
    );
    assert!(
        tag.ends_with("-bookworm"),
        "glibc of Debian 12, as the runtime"
    );
}

/// The builder's `cargo build` commands, as word lists.
fn cargo_builds(builder: &Stage) -> Vec<Vec<String>> {
    builder
        .all("RUN")
        .flat_map(|run| {
            run.args
                .split("&&")
                .map(|command| {
                    command
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .filter(|words| words.len() >= 2 && words[0] == "cargo" && words[1] == "build")
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_builder_builds_only_the_operator_binary() {
    let file = dockerfile();
    let builder = file.builder();
    let builds = cargo_builds(builder);
    assert_eq!(
        builds.len(),
        2,
        "a dependency build and the real build: {builds:?}"
    );
    for words in &builds {
        let has = |flag: &str| words.iter().any(|w| w == flag);
        let value = |flag: &str| {
            words
                .iter()
                .position(|w| w == flag)
                .and_then(|i| words.get(i + 1))
                .map(String::as_str)
        };
        assert!(has("--release") && has("--locked"), "{words:?}");
        assert_eq!(value("-p"), Some("consul-elector"), "{words:?}");
        assert_eq!(value("--bin"), Some("consul-elector"), "{words:?}");
        for forbidden in [
            "--workspace",
            "--all",
            "--all-targets",
            "--tests",
            "--target",
        ] {
            assert!(!has(forbidden), "{forbidden} in {words:?}");
        }
    }
    // testkit's sources never enter the image: only its manifest, and a stub.
    for copy in builder.all("COPY") {
        let (_, sources, _) = copy_parts(copy);
        for source in sources {
            assert!(
                source == "testkit/Cargo.toml" || !source.starts_with("testkit"),
                "line {}: copies {source}",
                copy.line
            );
        }
    }
    assert!(
        builder
            .all("RUN")
            .any(|r| r.args.contains("testkit/src/lib.rs")),
        "testkit needs a stub lib.rs so that cargo can load the workspace"
    );
}

#[test]
fn the_runtime_copies_the_path_cargo_builds() {
    let file = dockerfile();
    let builder = file.builder();
    let workdir = builder
        .last("WORKDIR")
        .expect("the builder sets WORKDIR")
        .args
        .clone();
    assert!(workdir.starts_with('/'), "absolute WORKDIR: {workdir}");
    // The bin target exists under this name (the macro fails to compile otherwise).
    let bin = Path::new(env!("CARGO_BIN_EXE_consul-elector"))
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a binary name")
        .to_owned();
    // No CARGO_TARGET_DIR or build.target-dir redirects the output.
    for env in builder.all("ENV") {
        assert!(!env.args.contains("CARGO_TARGET_DIR"), "line {}", env.line);
        assert!(
            !env.args.contains("CARGO_BUILD_TARGET"),
            "line {}",
            env.line
        );
    }
    assert!(!Path::new(ROOT).join(".cargo/config.toml").exists());
    assert!(!Path::new(ROOT).join(".cargo/config").exists());
    let expected = format!("{}/target/release/{bin}", workdir.trim_end_matches('/'));

    let runtime = file.runtime();
    let copies: Vec<_> = runtime
        .all("COPY")
        .map(copy_parts)
        .filter(|(flags, _, _)| flags.get("from").map(String::as_str) == Some("builder"))
        .collect();
    assert_eq!(copies.len(), 1, "one COPY --from=builder: {copies:?}");
    let (_, sources, destination) = &copies[0];
    assert_eq!(sources, &[expected]);

    let entrypoint = exec_form(runtime, "ENTRYPOINT");
    assert_eq!(
        entrypoint,
        std::slice::from_ref(destination),
        "ENTRYPOINT runs the copied binary"
    );
    assert!(destination.starts_with('/'), "{destination}");
}

#[test]
fn the_runtime_runs_as_a_numeric_non_root_user() {
    let file = dockerfile();
    let runtime = file.runtime();
    let user = runtime.last("USER").expect("the runtime stage sets USER");
    let uid = user.args.split(':').next().unwrap_or_default();
    let gid = user.args.split(':').nth(1);
    let uid: u32 = uid.parse().unwrap_or_else(|_| {
        panic!(
            "USER {} is not numeric (runAsNonRoot needs a UID)",
            user.args
        )
    });
    assert_ne!(uid, 0, "USER must not be root");
    assert_eq!(uid, 65532, "distroless's nonroot user");
    if let Some(gid) = gid {
        assert_ne!(gid.parse::<u32>().ok(), Some(0), "group must not be root");
    }
    // Nothing after USER switches back.
    let position = runtime
        .instructions
        .iter()
        .rposition(|i| i.keyword == "USER")
        .expect("USER");
    assert!(
        runtime.instructions[position..]
            .iter()
            .all(|i| i.keyword != "RUN"),
        "RUN after USER"
    );
    assert!(runtime.image.ends_with(":nonroot"), "{}", runtime.image);
}

#[test]
fn entrypoint_and_cmd_are_exec_form_and_cmd_is_run() {
    let runtime_stage = dockerfile().runtime().clone();
    assert_eq!(exec_form(&runtime_stage, "ENTRYPOINT").len(), 1);
    let cmd = exec_form(&runtime_stage, "CMD");
    assert_eq!(cmd, ["run"]);
    // `run` is a subcommand of the binary.
    assert!(Cli::command().find_subcommand("run").is_some());
}

#[test]
fn the_exposed_port_is_the_admin_servers_default() {
    let runtime = dockerfile().runtime().clone();
    let exposed: Vec<String> = runtime
        .all("EXPOSE")
        .flat_map(|i| {
            i.args
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let command = Cli::command();
    let default = command
        .find_subcommand("run")
        .and_then(|run| run.get_arguments().find(|a| a.get_id() == "metrics_addr"))
        .and_then(|arg| arg.get_default_values().first().cloned())
        .expect("--metrics-addr has a default");
    let port = default
        .to_str()
        .and_then(|addr| addr.rsplit(':').next())
        .expect("host:port")
        .to_owned();
    assert_eq!(exposed, [port]);
}

#[test]
fn oci_labels_describe_the_image() {
    let file = dockerfile();
    let runtime = file.runtime();
    let labels: String = runtime
        .all("LABEL")
        .map(|l| l.args.clone())
        .collect::<Vec<_>>()
        .join(" ");
    let label = |name: &str| -> String {
        let key = format!("org.opencontainers.image.{name}=\"");
        let start = labels
            .find(&key)
            .unwrap_or_else(|| panic!("label org.opencontainers.image.{name} missing"))
            + key.len();
        labels[start..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(label("title"), "consul-elector");
    assert_eq!(label("source"), env!("CARGO_PKG_REPOSITORY"));
    assert_eq!(label("licenses"), env!("CARGO_PKG_LICENSE"));
    assert_eq!(label("description"), env!("CARGO_PKG_DESCRIPTION"));
    assert_eq!(label("version"), "${VERSION}");
    assert_eq!(label("revision"), "${REVISION}");
    assert_eq!(label("base.name"), runtime.image);
    assert_eq!(
        stage_arg(runtime, "VERSION").as_deref(),
        Some(env!("CARGO_PKG_VERSION")),
        "the default VERSION build argument is the crate's version"
    );
    assert!(stage_arg(runtime, "REVISION").is_some());
}

/// `.dockerignore` patterns in order: (negated, pattern).
fn dockerignore() -> Vec<(bool, String)> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.strip_prefix('!') {
            Some(p) => (true, p.trim().trim_matches('/').to_owned()),
            None => (false, l.trim_matches('/').to_owned()),
        })
        .collect()
}

/// Go's `filepath.Match` for one path (`*` and `?` stop at `/`), plus `**` for any number of
/// path components, which is what Docker's pattern matcher adds.
fn glob(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    fn components(p: &[&str], s: &[&str]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(&"**"), _) => components(&p[1..], s) || (!s.is_empty() && components(p, &s[1..])),
            (Some(pc), Some(sc)) => {
                component(pc.as_bytes(), sc.as_bytes()) && components(&p[1..], &s[1..])
            }
            _ => false,
        }
    }
    fn component(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => component(&p[1..], s) || (!s.is_empty() && component(p, &s[1..])),
            (Some(b'?'), Some(_)) => component(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => component(&p[1..], &s[1..]),
            _ => false,
        }
    }
    components(&p, &s)
}

/// Whether Docker sends `path` (relative, `/`-separated) in the build context: the last
/// pattern that matches the path or one of its parent directories decides.
fn in_context(patterns: &[(bool, String)], path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let mut included = true;
    for (negated, pattern) in patterns {
        let matches = (1..=parts.len()).any(|n| glob(pattern, &parts[..n].join("/")));
        if matches {
            included = *negated;
        }
    }
    included
}

/// Every file below `dir` (relative to the repository), `/`-separated.
fn files_below(dir: &Path, relative: &str, out: &mut Vec<String>) {
    let full = dir.join(relative);
    if full.is_file() {
        out.push(relative.to_owned());
        return;
    }
    for entry in std::fs::read_dir(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display())) {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_str().expect("UTF-8 file names");
        files_below(dir, &format!("{relative}/{name}"), out);
    }
}

#[test]
fn every_copied_path_exists_and_is_in_the_build_context() {
    let file = dockerfile();
    let patterns = dockerignore();
    let mut checked = 0;
    for stage in &file.stages {
        for copy in stage.all("COPY").chain(stage.all("ADD")) {
            let (flags, sources, _) = copy_parts(copy);
            if flags.contains_key("from") {
                continue;
            }
            for source in sources {
                assert!(
                    !source.contains(['*', '?', '$']) && !source.starts_with('/'),
                    "line {}: {source} must be a plain relative path",
                    copy.line
                );
                let source = source.trim_end_matches('/').trim_start_matches("./");
                let path = Path::new(ROOT).join(source);
                assert!(path.exists(), "line {}: {source} does not exist", copy.line);
                let mut files = Vec::new();
                files_below(Path::new(ROOT), source, &mut files);
                assert!(!files.is_empty(), "{source} is empty");
                for f in files {
                    assert!(
                        in_context(&patterns, &f),
                        "line {}: {f} is excluded by .dockerignore",
                        copy.line
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 3, "only {checked} files checked");
}

#[test]
fn dockerignore_keeps_build_output_vcs_and_tests_out() {
    let patterns = dockerignore();
    for excluded in [
        "target/release/consul-elector",
        "target",
        ".git/HEAD",
        "tests/repo/dockerfile.rs",
        "testkit/src/lib.rs",
        "testkit/tests/foo.rs",
        "charts/consul-elector/Chart.yaml",
        "examples/web.yaml",
        "Dockerfile",
        ".github/workflows/ci.yml",
        "README.md",
    ] {
        assert!(
            !in_context(&patterns, excluded),
            "{excluded} is sent to Docker"
        );
    }
    for included in [
        "Cargo.toml",
        "Cargo.lock",
        "src/main.rs",
        "src/crd/mod.rs",
        "testkit/Cargo.toml",
    ] {
        assert!(
            in_context(&patterns, included),
            "{included} is not sent to Docker"
        );
    }
}

#[test]
fn the_matcher_follows_dockers_rules() {
    let p = |list: &[&str]| -> Vec<(bool, String)> {
        list.iter()
            .map(|l| match l.strip_prefix('!') {
                Some(p) => (true, p.to_owned()),
                None => (false, (*l).to_owned()),
            })
            .collect()
    };
    assert!(!in_context(&p(&["target"]), "target/a/b"));
    assert!(in_context(&p(&["target"]), "src/target.rs"));
    assert!(!in_context(&p(&["*.md"]), "README.md"));
    assert!(in_context(&p(&["*.md"]), "docs/README.md"));
    assert!(!in_context(&p(&["**/*.md"]), "docs/README.md"));
    assert!(in_context(&p(&["*", "!src"]), "src/a/b.rs"));
    assert!(!in_context(&p(&["*", "!src", "src/x"]), "src/x/y.rs"));
    assert!(glob("a?c", "abc") && !glob("a*", "a/b") && glob("**", "a/b/c"));
}

#[test]
fn the_parser_joins_continuations_and_skips_comments() {
    let file = parse(
        "# syntax=docker/dockerfile:1\nARG V=1\nFROM img:${V} AS b\nRUN a \\\n  # note\n  && b\n\nFROM other:2\nCMD [\"x\"]\n",
    );
    assert_eq!(file.global_args["V"], "1");
    assert_eq!(file.stages.len(), 2);
    assert_eq!(file.expand(&file.stages[0].image), "img:1");
    assert_eq!(file.stages[0].name.as_deref(), Some("b"));
    assert_eq!(file.stages[0].instructions[0].args, "a && b");
    assert_eq!(file.stages[1].instructions[0].keyword, "CMD");
    assert_eq!(
        image_tag("gcr.io/distroless/cc-debian12:nonroot"),
        Some("nonroot")
    );
    assert_eq!(image_tag("localhost:5000/img"), None);
}

/// Lays out a scratch directory the way the builder stage's `COPY`s lay out its `WORKDIR`,
/// runs the stage's `RUN` commands there with bash (the stage's `SHELL`) and its `ENV`, and
/// checks that the binary the runtime stage copies was built and is the operator. The machine's
/// toolchain stands in for the `rust` image; the `cargo build`s are exactly the image's.
#[test]
#[ignore = "compiles the operator in release mode from scratch like `docker build` (minutes); run with --ignored"]
fn builder_stage_builds_the_operator_from_a_clean_copy() {
    let file = dockerfile();
    let builder = file.builder();
    let workdir_in_image = builder.last("WORKDIR").expect("WORKDIR").args.clone();
    let scratch: PathBuf = std::env::temp_dir().join(format!(
        "consul-elector-docker-builder-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let patterns = dockerignore();
    let mut envs: Vec<(String, String)> = Vec::new();
    for instruction in &builder.instructions {
        match instruction.keyword.as_str() {
            "COPY" => {
                let (_, sources, destination) = copy_parts(instruction);
                for source in sources {
                    let mut files = Vec::new();
                    files_below(Path::new(ROOT), &source, &mut files);
                    for f in files.into_iter().filter(|f| in_context(&patterns, f)) {
                        // `COPY a b/` and `COPY a ./` put a inside; `COPY dir dir` copies
                        // the directory's contents to dir; `COPY file path` names the file.
                        let target = if destination.ends_with('/') {
                            scratch
                                .join(&destination)
                                .join(Path::new(&f).file_name().unwrap())
                        } else if Path::new(ROOT).join(&source).is_dir() {
                            scratch
                                .join(&destination)
                                .join(f.strip_prefix(&source).unwrap().trim_start_matches('/'))
                        } else {
                            scratch.join(&destination)
                        };
                        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                        std::fs::copy(Path::new(ROOT).join(&f), &target).unwrap();
                    }
                }
            }
            "ENV" => {
                for pair in instruction.args.split_whitespace() {
                    let (k, v) = pair.split_once('=').expect("ENV key=value");
                    envs.push((k.to_owned(), v.to_owned()));
                }
            }
            "RUN" => {
                assert!(
                    !instruction.args.contains(&workdir_in_image),
                    "absolute WORKDIR path in RUN"
                );
                let status = Command::new("bash")
                    .args(["-euo", "pipefail", "-c", &instruction.args])
                    .current_dir(&scratch)
                    .envs(envs.iter().map(|(k, v)| (k, v)))
                    .env_remove("CARGO_TARGET_DIR")
                    .env_remove("CARGO_BUILD_TARGET")
                    .env_remove("RUSTFLAGS")
                    .status()
                    .expect("bash runs");
                assert!(
                    status.success(),
                    "line {}: RUN failed: {}",
                    instruction.line,
                    instruction.args
                );
            }
            _ => {}
        }
    }
    let (_, sources, _) = file
        .runtime()
        .all("COPY")
        .map(copy_parts)
        .find(|(flags, _, _)| flags.contains_key("from"))
        .expect("COPY --from=builder");
    let built = scratch.join(
        sources[0]
            .strip_prefix(&workdir_in_image)
            .expect("the copied path is below WORKDIR")
            .trim_start_matches('/'),
    );
    let output = Command::new(&built)
        .arg("--version")
        .output()
        .expect("the binary runs");
    let version = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        version.trim(),
        format!("consul-elector {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        !scratch.join("target/release/libtestkit.rlib").exists()
            && std::fs::read_dir(scratch.join("target/release/deps"))
                .unwrap()
                .all(|e| !e.unwrap().file_name().to_string_lossy().contains("testkit")),
        "testkit was compiled"
    );
    std::fs::remove_dir_all(&scratch).expect("remove the scratch directory");
}

/// The Helm chart starts the image the way it is built: it passes `run ...` as arguments to
/// the ENTRYPOINT (no `command:` override), runs it as the image's user and probes the
/// exposed port by default.
#[test]
fn the_chart_runs_the_image_as_built() {
    let template = read("charts/consul-elector/templates/deployment.yaml");
    assert!(
        !template.contains("command:"),
        "the chart must not override the ENTRYPOINT"
    );
    let args = template
        .split_once("args:")
        .expect("the chart passes arguments")
        .1
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(args, "- run", "the first argument is the `run` subcommand");

    let values: serde_json::Value =
        serde_saphyr::from_str(&read("charts/consul-elector/values.yaml")).expect("values.yaml");
    let file = dockerfile();
    let user = file.runtime().last("USER").expect("USER").args.clone();
    let uid: u64 = user.split(':').next().unwrap().parse().unwrap();
    assert_eq!(
        values["podSecurityContext"]["runAsUser"].as_u64(),
        Some(uid)
    );
    assert_eq!(values["podSecurityContext"]["runAsNonRoot"], true);
    let exposed = file.runtime().last("EXPOSE").expect("EXPOSE").args.clone();
    assert_eq!(values["metrics"]["port"].to_string(), exposed);
}
