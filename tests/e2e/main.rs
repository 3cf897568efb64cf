//! End-to-end tests against a real cluster with the operator installed: the current kube
//! context, as `make demo` leaves it (a kind cluster, the image just built, the Helm chart
//! with `consulDev.enabled=true`).
//!
//! ```sh
//! make demo        # or any cluster where the chart is installed with a reachable Consul
//! make e2e         # ELECTOR_E2E=1 cargo test --test e2e -- --ignored --test-threads=1
//! ```
//!
//! Every test is `#[ignore]`d, so `cargo test --workspace` compiles the suite and reports it
//! ignored; it also returns at once, printing why, unless `ELECTOR_E2E=1` (so a stray
//! `cargo test -- --ignored` does not touch whatever cluster the current context names).
//!
//! Settings (environment):
//! - `ELECTOR_E2E=1`: run at all.
//! - `ELECTOR_E2E_NAMESPACE`: the operator's namespace (default `consul-elector`, the one
//!   `make demo` installs into); the operator pod and the dev Consul Service are found there
//!   by their chart labels.
//! - `ELECTOR_E2E_CONSUL_ADDR=http://host:port`: read Consul there instead of through the API
//!   server's proxy to the chart's dev Consul (for a cluster using an external Consul).
//! - `ELECTOR_E2E_KEEP=1`: keep a failed test's namespace for inspection.
//! - `ELECTOR_E2E_RELEASE`, `ELECTOR_E2E_CHART_VALUES`, `ELECTOR_HELM_PYTHON`: the release to
//!   uninstall and reinstall, its values file, and the python that runs Helm
//!   (`charts/tests/check_chart.py`); set by the real-node suite, which alone runs the
//!   uninstall test.
//!
//! Each test works in its own namespace (`e2e-<test>-<random>`), deleted afterwards, and on
//! failure prints the namespace's pods, LeaderElections and events and the operator's log.
//! The workload is `examples/web.yaml` itself, so the suite also proves the example works.

mod cleanup;
mod election;
mod failover;
mod harness;
mod operator_restart;
mod real_node;
mod silent_node;
mod traffic;
mod uninstall;
