//! What the testkit's command-line binaries (`sandbox`, `test-cluster`) share: acting on what
//! the command line asks for, and stopping on Ctrl-C or SIGTERM.

use std::future::Future;
use std::io;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

/// What a command line asks for.
pub enum Invocation<T> {
    /// `-h` or `--help`: the usage text.
    Help,
    /// A run with these options.
    Run(T),
}

/// The options to run with; or, after printing the usage (asked for: on stdout, exit code 0)
/// or the parse error (on stderr, exit code 2), the code to exit with.
pub fn run_or_exit<T>(parsed: Result<Invocation<T>, String>, usage: &str) -> Result<T, ExitCode> {
    match parsed {
        Ok(Invocation::Run(options)) => Ok(options),
        Ok(Invocation::Help) => {
            println!("{usage}");
            Err(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("{message}");
            Err(ExitCode::from(2))
        }
    }
}

/// Installs handlers for SIGINT (Ctrl-C) and SIGTERM at once, so that neither kills the
/// process from then on; the future resolves on the first of them. Must be called within a
/// tokio runtime. Fails when a handler cannot be installed.
pub fn stop_requested() -> io::Result<impl Future<Output = ()>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// What every testkit binary does first: logs to stderr (`RUST_LOG`, by default warnings
/// but none of kube's client, which logs every failed request such as the cluster's
/// readiness probes during its start: the binaries report their own failures), and a
/// multi-threaded tokio runtime. `program` prefixes the message when the runtime cannot start.
pub fn start(program: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client=off")),
        )
        .init();
    tokio::runtime::Runtime::new().map_err(|error| {
        eprintln!("{program}: cannot start the async runtime: {error}");
        ExitCode::FAILURE
    })
}
