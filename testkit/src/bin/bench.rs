//! `cargo run --release -p testkit --bin bench -- <scenario>... | --quick`: the benchmark
//! driver (see `testkit::bench`).

use std::process::ExitCode;
use std::time::Duration;

use testkit::bench::{self, Outcome};
use testkit::cli;

fn main() -> ExitCode {
    let options = match cli::run_or_exit(bench::parse(std::env::args().skip(1)), bench::USAGE) {
        Ok(options) => options,
        Err(exit) => return exit,
    };
    let runtime = match cli::start("bench") {
        Ok(runtime) => runtime,
        Err(exit) => return exit,
    };
    let outcome = runtime.block_on(async {
        let stop = cli::stop_requested().map_err(|error| format!("signal handlers: {error}"))?;
        tokio::select! {
            outcome = bench::run(&options) => outcome.map(Some),
            () = stop => Ok(None),
        }
    });
    // A build interrupted by Ctrl-C may still run on the blocking pool; do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(Some(Outcome::Passed)) => ExitCode::SUCCESS,
        Ok(Some(Outcome::Failed)) => ExitCode::FAILURE,
        Ok(None) => {
            eprintln!("bench: interrupted");
            ExitCode::from(130)
        }
        Err(error) => {
            eprintln!("bench: {error}");
            ExitCode::FAILURE
        }
    }
}
