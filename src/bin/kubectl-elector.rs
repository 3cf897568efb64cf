//! `kubectl-elector`: the kubectl plugin (`kubectl elector ...`); see
//! [`consul_elector::plugin`].

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use consul_elector::plugin::{self, Cli};

fn main() -> ExitCode {
    // kube's client and the Consul client build TLS configurations from the process default.
    consul_elector::install_crypto_provider();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(plugin::run(cli)) {
        Ok(report) => {
            // A closed pipe (`| head`) is not worth a panic.
            let _ = std::io::stdout().write_all(report.text.as_bytes());
            if report.success {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
