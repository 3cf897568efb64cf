//! The `consul-elector` binary: parse the command line, install the rustls crypto provider,
//! then print the CRD, delete the elections before an uninstall, or run the operator until
//! SIGTERM/SIGINT.

use std::process::ExitCode;

use consul_elector::cli::{self, Command, LogFormat, RunArgs, UninstallArgs, init_tracing};
use consul_elector::cluster_identity;
use consul_elector::consul::{ConsulClient, ConsulSettings};
use consul_elector::context::Settings;
use consul_elector::election::config::Owner;
use consul_elector::http::{self, Health};
use consul_elector::leadership::{LeaseSettings, WallClock};
use consul_elector::metrics::Metrics;
use consul_elector::operator;
use consul_elector::uninstall;

/// The operator's allocator. With glibc's malloc, the arenas of tokio's worker threads held
/// about 1.8 times the live heap at 10,000 elections; jemalloc returns freed pages to the
/// system on its own (BENCHMARKS.md, "Scale", 2026-11-27).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read by jemalloc before `main` (this symbol overrides the library's
/// weak `malloc_conf`; `_RJEM_MALLOC_CONF` in the environment still overrides each option at
/// run time). Two arenas instead of four per core, freed pages returned after one second
/// instead of ten, and by a background thread, so that an arena nobody allocates from any
/// more still gives its pages back (BENCHMARKS.md, "Scale", 2026-11-27, afternoon).
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static std::ffi::c_char> =
    // SAFETY: a pointer to the first byte of a NUL-terminated string literal, valid forever.
    Some(unsafe { &*c"narenas:2,background_thread:true,dirty_decay_ms:1000".as_ptr() });

fn main() -> ExitCode {
    // kube (ring) and the Consul client (rustls) both build TLS configurations from the
    // process-wide default provider; install exactly one before anything else.
    consul_elector::install_crypto_provider();
    let lookup = |name: &str| std::env::var(name).ok();
    let cli = cli::parse_from_env(std::env::args_os(), lookup).unwrap_or_else(|error| error.exit());
    match cli.command {
        Command::Crd => match consul_elector::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("cannot render the CRD: {error}");
                ExitCode::FAILURE
            }
        },
        Command::ReleaseElections(args) => hook(args, uninstall::Course::Release),
        Command::DeleteElections(args) => hook(args, uninstall::Course::Delete),
        Command::Run(args) => match (tokio::runtime::Runtime::new(), session_runtime()) {
            (Ok(runtime), Ok(sessions)) => {
                let code = runtime.block_on(run(*args, sessions.handle().clone()));
                // Outside any async context: a runtime cannot be dropped inside one.
                drop(runtime);
                drop(sessions);
                code
            }
            (Err(error), _) | (_, Err(error)) => {
                eprintln!("cannot start the async runtime: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Runs the uninstall hook on a runtime of its own.
fn hook(args: UninstallArgs, course: uninstall::Course) -> ExitCode {
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(uninstall(args, course)),
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `release-elections` and `delete-elections`: the uninstall hook.
async fn uninstall(args: UninstallArgs, course: uninstall::Course) -> ExitCode {
    if let Err(error) = init_tracing(LogFormat::Plain, "info") {
        eprintln!("cannot set up logging: {error}");
        return ExitCode::FAILURE;
    }
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "cannot reach the Kubernetes API");
            return ExitCode::FAILURE;
        }
    };
    let lease_namespace = args
        .lease
        .lease_namespace
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let scope = uninstall::Scope {
        namespaces: args.scope.watch_namespaces.names().to_vec(),
        install: Owner::install_of_lease(&lease_namespace, &args.lease.lease_name),
        lease: (lease_namespace, args.lease.lease_name),
    };
    let wall = consul_elector::wall_clock::WallClock::system();
    match uninstall::uninstall(client, &scope, course, args.timeout, &wall).await {
        Ok(count) => {
            tracing::info!(count, ?course, "every LeaderElection is released");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "the LeaderElections are not all released");
            ExitCode::FAILURE
        }
    }
}

/// The runtime of the Consul session requests and renewal tasks: one worker thread of its
/// own, so that reconciles keeping the main runtime's workers busy can never delay a renewal.
fn session_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("consul-sessions")
        .enable_all()
        .build()
}

async fn run(args: RunArgs, sessions: tokio::runtime::Handle) -> ExitCode {
    if let Err(error) = init_tracing(args.log_format, &args.log_filter) {
        eprintln!("cannot set up logging: {error}");
        return ExitCode::FAILURE;
    }
    for (current, former) in
        consul_elector::env_names::former_in_use(|name| std::env::var(name).ok())
    {
        tracing::warn!(
            variable = former,
            "{former} is read as {current}, its current name; rename it (the former name will not always be read)"
        );
    }
    let consul = match ConsulSettings::from_process_env()
        .map(|mut settings| {
            settings.allowed_addresses = args.consul_allowed_addresses.entries().to_vec();
            settings.allowed_datacenters = args.consul_allowed_datacenters.entries().to_vec();
            settings
        })
        .map_err(|e| e.to_string())
        .and_then(|s| ConsulClient::with_session_runtime(&s, sessions).map_err(|e| e.to_string()))
    {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "invalid Consul settings");
            return ExitCode::FAILURE;
        }
    };
    let kube = match kube::Config::infer()
        .await
        .map_err(|e| e.to_string())
        .and_then(|config| operator::KubeClients::from_config(config).map_err(|e| e.to_string()))
    {
        Ok(kube) => kube,
        Err(error) => {
            tracing::error!(%error, "cannot build a Kubernetes client");
            return ExitCode::FAILURE;
        }
    };
    let client = kube.client.clone();
    let cluster_name = match cluster_identity::resolve(&client, args.cluster_name.clone()).await {
        Ok(name) => name,
        Err(error) => {
            tracing::error!(
                %error,
                "cannot determine the cluster name: set --cluster-name (ELECTOR_CLUSTER_NAME) \
                 or allow the operator to get the kube-system namespace"
            );
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        consul = %consul.address(),
        cluster = %cluster_name,
        namespaces = ?args.scope.watch_namespaces.names(),
        "starting consul-elector"
    );
    let metrics = Metrics::new();
    consul.observe_requests(metrics.consul_observer());
    let health = Health::new(args.liveness_timeout);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    let server = match http::bind(
        args.metrics_addr,
        metrics.clone(),
        health.clone(),
        stopped(),
    )
    .await
    {
        Ok((addr, server)) => {
            tracing::info!(%addr, "serving /metrics, /livez and /readyz");
            tokio::spawn(server)
        }
        Err(error) => {
            tracing::error!(%error, addr = %args.metrics_addr, "cannot bind the admin server");
            return ExitCode::FAILURE;
        }
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let lease = LeaseSettings {
        name: args.lease.lease_name,
        namespace: args
            .lease
            .lease_namespace
            .unwrap_or_else(|| client.default_namespace().to_owned()),
        identity: args.instance_name.clone(),
        duration: args.lease_duration,
        renew_deadline: args.lease_renew_deadline,
        wall_clock: WallClock::system(),
    };
    if let Err(error) = lease.validate() {
        tracing::error!(%error, "invalid lease settings");
        return ExitCode::FAILURE;
    }
    let settings = Settings {
        watch_namespaces: args.scope.watch_namespaces.names().to_vec(),
        field_manager: args.field_manager,
        instance: args.instance_name,
        lock_watch_wait: args.lock_watch_wait,
        concurrency: 16,
        owner: Owner::new(
            cluster_name,
            Owner::install_of_lease(&lease.namespace, &lease.name),
        )
        .with_former(args.former_names.entries().to_vec()),
        lease,
        consul_cleanup_bound: consul_elector::election::cleanup_deadline::CONSUL_CLEANUP_BOUND,
    };
    match operator::run(kube, consul, settings, metrics, health, stopped()).await {
        Ok(()) => {
            let _ = server.await;
            ExitCode::SUCCESS
        }
        Err(error) => {
            // Exiting is what makes "stopped writing" final: the restarted container is a
            // standby until it holds the Lease again.
            tracing::error!(%error, "stopping");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
