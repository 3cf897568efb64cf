//! The repository's checks, in one binary: what the README, the docs, the Dockerfile, the
//! Makefile, the CI workflows, the chart's alert rules and admission policy, and the module
//! graph promise, each checked against the files it is about.
//!
//! Run one file's checks by its module path: `cargo test --test repo readme::`.

mod admission_policy;
mod dockerfile;
mod docs_references;
mod gitops_health;
mod makefile;
mod module_cycles;
mod operations;
mod readme;
mod workflows;
