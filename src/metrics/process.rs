//! The standard `process_*` metrics every Prometheus client library exports (CPU seconds,
//! resident and virtual memory, open and maximum file descriptors, threads, start time), read
//! from `/proc/self` at each scrape. On systems without `/proc` nothing is reported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads this process's figures at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One process figure: a name without unit suffixes added by the encoder, its help, type and
/// value.
struct Sample {
    name: &'static str,
    help: &'static str,
    value: f64,
    counter: bool,
}

impl Sample {
    fn gauge(name: &'static str, help: &'static str, value: f64) -> Self {
        Self {
            name,
            help,
            value,
            counter: false,
        }
    }
}

/// Byte and tick counts as the `f64` samples Prometheus stores (exact below 2^53).
fn float(value: u64) -> f64 {
    value as f64
}

#[cfg(target_os = "linux")]
fn samples() -> Vec<Sample> {
    use procfs::WithCurrentSystemInfo;
    use procfs::process::{LimitValue, Process};

    let Ok(me) = Process::myself() else {
        return Vec::new();
    };
    let mut samples = Vec::new();
    if let Ok(stat) = me.stat() {
        let ticks = float(procfs::ticks_per_second().max(1));
        samples.push(Sample {
            name: "process_cpu_seconds",
            help: "Total user and system CPU time spent in seconds",
            value: float(stat.utime.saturating_add(stat.stime)) / ticks,
            counter: true,
        });
        samples.push(Sample::gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            float(stat.rss_bytes().get()),
        ));
        samples.push(Sample::gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            float(stat.vsize),
        ));
        samples.push(Sample::gauge(
            "process_threads",
            "Number of OS threads in the process",
            float(u64::try_from(stat.num_threads).unwrap_or(0)),
        ));
        if let Ok(boot) = procfs::boot_time_secs() {
            samples.push(Sample::gauge(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                float(boot) + float(stat.starttime) / ticks,
            ));
        }
    }
    if let Ok(fds) = me.fd_count() {
        samples.push(Sample::gauge(
            "process_open_fds",
            "Number of open file descriptors",
            float(u64::try_from(fds).unwrap_or(u64::MAX)),
        ));
    }
    if let Ok(limits) = me.limits()
        && let LimitValue::Value(max) = limits.max_open_files.soft_limit
    {
        samples.push(Sample::gauge(
            "process_max_fds",
            "Maximum number of open file descriptors",
            float(max),
        ));
    }
    samples
}

#[cfg(not(target_os = "linux"))]
fn samples() -> Vec<Sample> {
    Vec::new()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for sample in samples() {
            let kind = if sample.counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            let metric = encoder.encode_descriptor(sample.name, sample.help, None, kind)?;
            if sample.counter {
                ConstCounter::new(sample.value).encode(metric)?;
            } else {
                ConstGauge::new(sample.value).encode(metric)?;
            }
        }
        Ok(())
    }
}
