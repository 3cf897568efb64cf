//! What a phase cost, from outside the operator: its CPU and memory (`/proc`), the cluster
//! processes' CPU (and a real Consul server's, with its peak memory), the Consul requests and
//! connections (the emulator's counters, or the same counters kept by the real server's
//! meter) and the API requests by verb and resource (the API server's metrics).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;

use super::apiserver_metrics::RequestCounts;
use super::environment::Environment;
use super::proc_stats;
use super::report::ScenarioReport;
use crate::consul::Stats;

/// The counters at the start of a phase.
pub(crate) struct Baseline {
    at: Instant,
    api: RequestCounts,
    cluster_cpu: BTreeMap<&'static str, f64>,
    operator_cpu: f64,
}

/// What a phase cost.
pub(crate) struct Usage {
    /// How long it lasted, seconds.
    pub(crate) seconds: f64,
    /// The operator's CPU seconds in it.
    pub(crate) operator_cpu: f64,
    /// API requests in it.
    pub(crate) api: RequestCounts,
    /// Consul's request and connection counters of it.
    pub(crate) consul: Stats,
}

impl Usage {
    /// API writes other than events, and events.
    pub(crate) fn api_writes(&self) -> (f64, f64) {
        self.api.writes().total_and_events()
    }
}

impl Baseline {
    /// Zeroes Consul's counters and reads the others (`operator_pid`: the operator's
    /// process, `None` before it starts).
    pub(crate) async fn take(env: &Environment, operator_pid: Option<u32>) -> Result<Self, String> {
        env.consul.reset_stats();
        Ok(Self {
            at: Instant::now(),
            api: RequestCounts::scrape(&env.client).await?,
            cluster_cpu: env.cluster_cpu(),
            operator_cpu: operator_pid
                .and_then(proc_stats::read)
                .map_or(0.0, |stats| stats.cpu_seconds),
        })
    }

    /// Reads the counters again and adds the phase's rows, named `phase: ...`, to `report`.
    pub(crate) async fn finish(
        &self,
        env: &Environment,
        operator_pid: u32,
        phase: &str,
        report: &mut ScenarioReport,
    ) -> Result<Usage, String> {
        let api = RequestCounts::scrape(&env.client).await?.since(&self.api);
        let consul = env.consul.stats();
        let operator = proc_stats::read(operator_pid);
        let cluster_cpu = env.cluster_cpu();
        let usage = Usage {
            seconds: self.at.elapsed().as_secs_f64(),
            operator_cpu: operator.map_or(0.0, |o| o.cpu_seconds - self.operator_cpu),
            api,
            consul,
        };
        let name = |what: &str| format!("{phase}: {what}");
        report.row(name("duration"), Some(usage.seconds), "s");
        report.row(name("operator CPU"), Some(usage.operator_cpu), "s");
        report.target(
            name("operator peak RSS"),
            operator.map(|o| o.peak_rss_mib),
            "MiB",
            Some("< 256 MiB"),
        );
        let cpu_in_phase = |process: &str| {
            let before = self.cluster_cpu.get(process).copied().unwrap_or(0.0);
            cluster_cpu.get(process).map(|cpu| cpu - before)
        };
        for process in cluster_cpu.keys() {
            report.row(name(&format!("{process} CPU")), cpu_in_phase(process), "s");
        }
        // The machine's speed drifts between runs, and the API server's pace sets how long
        // a cold start lasts; the operator's CPU per API-server CPU of the same phase stays
        // steady for one binary, so it is the figure that compares two builds.
        report.row(
            name("operator CPU per kube-apiserver CPU"),
            cpu_in_phase("kube-apiserver")
                .filter(|api| *api > 0.0)
                .map(|api| usage.operator_cpu / api),
            "",
        );
        if let Some(server) = env.consul_server() {
            report.row(
                name("consul server peak RSS"),
                Some(server.peak_rss_mib),
                "MiB",
            );
        }
        report.row(
            name("Consul requests"),
            Some(usage.consul.total_requests() as f64),
            "",
        );
        for (endpoint, count) in &usage.consul.requests {
            report.row(
                name(&format!("Consul requests, {endpoint}")),
                Some(*count as f64),
                "",
            );
        }
        report.target(
            name("Consul connections, most open at once"),
            Some(usage.consul.connections_max as f64),
            "",
            Some("<= 64"),
        );
        report.row(
            name("Consul connections opened"),
            Some(usage.consul.connections_total as f64),
            "",
        );
        let (writes, events) = usage.api_writes();
        let (requests, _) = usage.api.total_and_events();
        report.row(name("API requests (all clients)"), Some(requests), "");
        report.row(
            name("API writes, events apart (all clients)"),
            Some(writes),
            "",
        );
        report.row(name("API event writes (all clients)"), Some(events), "");
        report.detail(
            &name("consul requests by kind"),
            json!(usage.consul.requests),
        );
        report.detail(&name("api requests"), usage.api.to_json());
        report.detail(&name("api writes"), usage.api.writes().to_json());
        Ok(usage)
    }
}
