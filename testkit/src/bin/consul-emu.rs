//! Standalone Consul HTTP API emulator.
//!
//! ```text
//! consul-emu [--listen 127.0.0.1:8500] [--ttl-multiplier N] [--no-jitter]
//!            [--session-ttl-min 10s] [--max-value-size BYTES] [--node NAME]
//!            [--datacenter DC] [--manual-clock]
//! ```
//!
//! Runs with the tokio (real-time) clock unless `--manual-clock` is given (then time only
//! moves through `PUT /_emu/advance?by=5s`). Stops on Ctrl-C. Logging follows `RUST_LOG`
//! (default `info`).

use std::process::ExitCode;

use testkit::consul::{ClockMode, Emulator, EmulatorConfig, parse_go_duration};

const USAGE: &str = "usage: consul-emu [--listen ADDR] [--ttl-multiplier N] [--no-jitter] \
[--session-ttl-min DURATION] [--max-value-size BYTES] [--node NAME] [--datacenter DC] \
[--manual-clock]";

fn parse_args(args: impl Iterator<Item = String>) -> Result<EmulatorConfig, String> {
    let mut config = EmulatorConfig {
        listen: ([127, 0, 0, 1], 8500).into(),
        clock: ClockMode::Tokio,
        ..EmulatorConfig::default()
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--listen" => {
                config.listen = value()?.parse().map_err(|e| format!("--listen: {e}"))?;
            }
            "--ttl-multiplier" => {
                config.ttl_multiplier = value()?
                    .parse()
                    .map_err(|e| format!("--ttl-multiplier: {e}"))?;
            }
            "--session-ttl-min" => {
                let ns =
                    parse_go_duration(&value()?).map_err(|e| format!("--session-ttl-min: {e}"))?;
                config.session_ttl_min =
                    std::time::Duration::from_nanos(u64::try_from(ns).unwrap_or(0));
            }
            "--max-value-size" => {
                config.max_value_size = value()?
                    .parse()
                    .map_err(|e| format!("--max-value-size: {e}"))?;
            }
            "--node" => config.node_name = value()?,
            "--datacenter" => config.datacenter = value()?,
            "--no-jitter" => config.jitter = false,
            "--manual-clock" => config.clock = ClockMode::Manual,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let emulator = match Emulator::start(config).await {
        Ok(emulator) => emulator,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the emulator");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(url = %emulator.url(), "serving the Consul HTTP API; Ctrl-C to stop");
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::error!(error = %e, "cannot wait for Ctrl-C");
    }
    emulator.shutdown().await;
    ExitCode::SUCCESS
}
