//! `kubectl-elector`: the kubectl plugin (`kubectl elector ...`); see
//! [`consul_elector::plugin`].

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use consul_elector::plugin::{self, Cli};

fn main() -> ExitCode {
    // kube's client and the Consul client build TLS configurations from the process default.
    consul_elector::install_crypto_provider();
    // `kubectl_complete-elector` (kubectl's completion of `kubectl elector`) runs this with
    // the words typed so far; they are no command line to parse.
    let mut args = std::env::args().skip(1);
    let completing = args.next().as_deref() == Some("__complete");
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
    // Output goes out as it comes (`--watch` prints until interrupted); a closed pipe
    // (`| head`) ends the command instead of panicking.
    let emit = |text: &str| {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .is_ok()
    };
    if completing {
        let words: Vec<String> = args.collect();
        emit(&runtime.block_on(plugin::complete::complete(&words)));
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    match runtime.block_on(plugin::watch_command(cli, emit)) {
        Ok(success) => {
            if success {
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
