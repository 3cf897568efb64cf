//! The GitHub workflows, checked here because GitHub Actions cannot run here: least
//! privilege (`permissions: {}` at the top, at most `contents: read` per job, no persisted
//! checkout credentials), every action pinned to a major version, caching on, and the steps
//! run the project's own commands (the README's test command, `make crds-check`, the chart
//! checker, `make demo` and `make e2e`), whose targets must exist in the Makefile.

use std::path::Path;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn workflow(name: &str) -> Value {
    let path = Path::new(ROOT).join(".github/workflows").join(name);
    let text = std::fs::read_to_string(&path).expect("the workflow exists");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: invalid YAML: {e}"))
}

/// Every step of every job: (job, step).
fn steps(workflow: &Value) -> Vec<(String, Value)> {
    let jobs = workflow["jobs"].as_object().expect("jobs");
    jobs.iter()
        .flat_map(|(job, body)| {
            body["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(|s| (job.clone(), s.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// All `run:` scripts of a workflow, joined.
fn scripts(workflow: &Value) -> String {
    steps(workflow)
        .iter()
        .filter_map(|(_, s)| s["run"].as_str().map(str::to_owned))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_hygiene(name: &str) {
    check_hygiene_allowing(name, &[]);
}

/// [`check_hygiene`], allowing each `(job, scope)` of `writers` write access to that scope
/// (a release upload, a package push, cosign's signing identity).
fn check_hygiene_allowing(name: &str, writers: &[(&str, &str)]) {
    let wf = workflow(name);
    assert_eq!(
        wf["permissions"],
        serde_json::json!({}),
        "{name}: top-level permissions: {{}}"
    );
    for (job, body) in wf["jobs"].as_object().unwrap() {
        if let Some(permissions) = body.get("permissions").and_then(Value::as_object) {
            for (scope, level) in permissions {
                let allowed = (scope == "contents" && level == "read")
                    || (level == "write" && writers.contains(&(job.as_str(), scope.as_str())));
                assert!(
                    allowed,
                    "{name}/{job}: {scope}: {level} is more than read access"
                );
            }
        }
    }
    let mut cached = false;
    for (job, step) in steps(&wf) {
        let Some(uses) = step["uses"].as_str() else {
            continue;
        };
        let (action, version) = uses.split_once('@').expect("uses: action@version");
        let major = version.strip_prefix('v').unwrap_or_default();
        assert!(
            !major.is_empty() && major.chars().all(|c| c.is_ascii_digit()),
            "{name}/{job}: {action} must be pinned to a major version (@vN), not @{version}"
        );
        if action == "actions/checkout" {
            assert_eq!(
                step["with"]["persist-credentials"],
                Value::Bool(false),
                "{name}/{job}: checkout must not persist credentials"
            );
        }
        cached |= action == "Swatinem/rust-cache"
            || action == "actions/cache"
            || step["with"]["cache-from"].is_string();
    }
    assert!(cached, "{name}: no caching");
}

/// The Makefile's targets.
fn make_targets() -> Vec<String> {
    std::fs::read_to_string(Path::new(ROOT).join("Makefile"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(t, _)| t.to_owned()))
        .filter(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .collect()
}

#[test]
fn ci_runs_fmt_clippy_tests_crd_drift_chart_lint_and_the_image_build() {
    check_hygiene("ci.yml");
    let wf = workflow("ci.yml");
    let run = scripts(&wf);
    for command in [
        "cargo fmt --all -- --check",
        "cargo clippy --workspace --all-targets --locked -- -D warnings",
        "cargo test --workspace",
        "make crds-check",
        "charts/tests/check_chart.py lint",
        "testkit/scripts/build-kube.sh",
    ] {
        assert!(run.contains(command), "ci.yml does not run {command}");
    }
    assert!(make_targets().contains(&"crds-check".to_owned()));
    let uses: Vec<String> = steps(&wf)
        .iter()
        .filter_map(|(_, s)| s["uses"].as_str().map(str::to_owned))
        .collect();
    assert!(
        uses.iter()
            .any(|u| u.starts_with("hadolint/hadolint-action@"))
    );
    assert!(
        uses.iter()
            .any(|u| u.starts_with("docker/build-push-action@"))
    );
    // The test job runs on Debian bookworm: the test cluster is built from its sources.
    let container = wf["jobs"]["test"]["container"].as_str().unwrap_or_default();
    assert!(container.ends_with("-bookworm"), "{container}");
}

#[test]
fn e2e_creates_kind_builds_the_image_and_runs_make_demo_and_make_e2e() {
    check_hygiene("e2e.yml");
    let wf = workflow("e2e.yml");
    let run = scripts(&wf);
    assert!(run.contains("make demo"), "{run}");
    assert!(run.contains("SKIP_IMAGE_BUILD=1"), "{run}");
    assert!(run.contains("make e2e"), "{run}");
    let targets = make_targets();
    for target in ["demo", "e2e"] {
        assert!(targets.contains(&target.to_owned()), "no make {target}");
    }
    let uses: Vec<String> = steps(&wf)
        .iter()
        .filter_map(|(_, s)| s["uses"].as_str().map(str::to_owned))
        .collect();
    for action in [
        "helm/kind-action@",
        "azure/setup-helm@",
        "docker/build-push-action@",
    ] {
        assert!(uses.iter().any(|u| u.starts_with(action)), "no {action}");
    }
    // The image built by the workflow is the one make loads into kind.
    let tag = wf["env"]["IMAGE_TAG"].as_str().expect("env.IMAGE_TAG");
    let built = steps(&wf)
        .into_iter()
        .find(|(_, s)| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("docker/build-push-action@"))
        })
        .map(|(_, s)| s["with"]["tags"].as_str().unwrap_or_default().to_owned())
        .unwrap();
    assert_eq!(built, "consul-elector:${{ env.IMAGE_TAG }}");
    assert!(!tag.is_empty());
    assert!(run.contains("IMAGE_TAG=\"$IMAGE_TAG\""), "{run}");
}

#[test]
fn release_builds_the_operator_and_the_plugin_and_only_publish_may_write() {
    check_hygiene_allowing(
        "release.yml",
        &[
            ("publish", "contents"),
            ("image", "packages"),
            ("image", "id-token"),
            ("chart", "packages"),
        ],
    );
    let wf = workflow("release.yml");
    let run = scripts(&wf);
    let matrix = wf["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_array()
        .expect("a build matrix");
    let builds = |target: &str, binary: &str| {
        matrix.iter().any(|m| {
            m["target"] == target && m["bins"].as_str().is_some_and(|b| b.contains(binary))
        })
    };
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        assert!(
            builds(target, "--bin consul-elector"),
            "{target}: the operator"
        );
    }
    for target in [
        "x86_64-unknown-linux-musl",
        "aarch64-unknown-linux-musl",
        "x86_64-apple-darwin",
        "aarch64-apple-darwin",
        "x86_64-pc-windows-msvc",
    ] {
        assert!(
            builds(target, "--bin kubectl-elector"),
            "{target}: the plugin"
        );
        assert!(run.contains(target), "the krew manifest names {target}");
    }
    assert!(
        run.contains("src/plugin/kubectl_complete-elector"),
        "the plugin's archives hold kubectl_complete-elector: {run}"
    );
    assert!(run.contains("--locked"), "{run}");
    assert!(run.contains("shasum -a 256"), "{run}");
    // The image: both architectures, pushed and signed; the chart pushed as OCI; tag, chart
    // version and appVersion checked to agree; the digest in the release notes.
    let text = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/release.yml"))
        .expect("release.yml");
    for needed in [
        "platforms: linux/amd64,linux/arm64",
        "cosign sign --yes",
        "helm push",
        "they must agree",
        "gh release edit",
    ] {
        assert!(text.contains(needed), "release.yml lacks {needed:?}");
    }
    assert_eq!(
        wf["jobs"]["build"]["permissions"]["contents"], "read",
        "the build jobs only read"
    );
    assert!(
        wf["jobs"]["publish"]["needs"]
            .as_array()
            .is_some_and(|needs| needs.iter().any(|n| n == "build")),
        "publish waits for the builds"
    );
}
