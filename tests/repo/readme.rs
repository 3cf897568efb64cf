//! The README as a newcomer meets it: the two commands that run the product and the tests
//! come first, in one block; the supported Kubernetes versions are stated once and match the
//! chart's `kubeVersion`; the sections follow a user's path (what it is, where the
//! documentation is, why use it, install, configure, operate, then the developer's material:
//! try it on kind, real nodes or the sandbox, develop and test); CI runs the README's test
//! command; and the license file is the one Cargo declares, linked from the README with the
//! changelog and the security policy.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_first_block_holds_the_sandbox_and_the_test_command() {
    let readme = read("README.md");
    let first_block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a first sh block");
    let commands: Vec<&str> = first_block
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands,
        vec![
            "cargo run -p testkit --bin sandbox",
            "cargo test --workspace"
        ]
    );
    let before = &readme[..readme.find("```sh").expect("the block")];
    assert!(
        before.lines().filter(|l| l.starts_with("## ")).count() == 0,
        "nothing comes before the block but the title: {before}"
    );
    assert!(
        read(".ci/run").contains("cargo test --workspace"),
        ".ci/run runs the README's test command"
    );
}

#[test]
fn the_supported_kubernetes_versions_are_stated_once_and_match_the_chart() {
    let readme = read("README.md");
    let statements: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("Supported Kubernetes versions"))
        .collect();
    assert_eq!(statements.len(), 1, "{statements:?}");
    let minor = statements[0]
        .split("versions: 1.")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .expect("versions: 1.<minor>");
    let chart = read("charts/consul-elector/Chart.yaml");
    let kube_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("kubeVersion:"))
        .expect("Chart.yaml has a kubeVersion")
        .trim()
        .trim_matches('"');
    assert_eq!(kube_version, format!(">=1.{minor}.0-0"));
    assert!(
        statements[0].contains(kube_version),
        "the statement names the chart's constraint: {}",
        statements[0]
    );
}

#[test]
fn the_sections_follow_a_users_path() {
    let readme = read("README.md");
    let sections: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    assert_eq!(
        sections,
        vec![
            "What it is",
            "Documentation",
            "Why consul-elector",
            "Install with Helm",
            "Configure",
            "Operate",
            "Try it",
            "Develop and test"
        ]
    );
}

#[test]
fn the_license_is_the_one_cargo_declares_and_the_readme_links_the_project_files() {
    let manifest = read("Cargo.toml");
    assert!(
        manifest.contains("license = \"Apache-2.0\""),
        "Cargo.toml's license"
    );
    let license = read("LICENSE");
    assert!(
        license.contains("Apache License") && license.contains("Version 2.0, January 2004"),
        "LICENSE is not the Apache License 2.0 that Cargo.toml declares"
    );
    let readme = read("README.md");
    for file in ["LICENSE", "CHANGELOG.md", "SECURITY.md"] {
        assert!(!read(file).trim().is_empty(), "{file} is empty");
        assert!(
            readme.contains(&format!("]({file})")),
            "README does not link {file}"
        );
    }
}
