//! The repository's checks, in one binary: what the README, the docs, the Dockerfile, the
//! Makefile, the CI workflows, the chart's alert rules and admission policy, and the module
//! graph promise, each checked against the files it is about.
//!
//! Run one file's checks by its module path: `cargo test --test repo readme::`.

mod admission_policy;
mod chart_readme;
mod dockerfile;
mod docs_references;
mod gitops_health;
mod makefile;
mod module_cycles;
mod operations;
mod readme;
mod workflows;

/// A check that needs a tool the machine lacks: it fails in CI (`CI=true`, where `.ci/run`
/// installs the tool), and elsewhere prints that `test` was skipped, `missing` what, and
/// `remedy` how to get it.
fn skip_unless_ci(test: &str, missing: &str, remedy: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{missing} (CI=true: this check never skips in CI); {remedy}"
    );
    eprintln!("SKIPPED {test}: {missing}; {remedy}");
}
