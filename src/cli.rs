//! Command line of the `consul-elector` binary (every option can also be set through an
//! environment variable) and the tracing setup.
//!
//! Consul connection settings are not options: like Consul's own tools, the operator reads
//! Consul's environment variables through [`ConsulSettings::from_process_env`].
//!
//! [`ConsulSettings::from_process_env`]: crate::consul::ConsulSettings::from_process_env

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::{SubscriberInitExt, TryInitError};

use crate::consul::{ConsulAddress, MAX_WAIT, parse_go_duration};
use crate::crd::is_datacenter_name;

/// Help text shown after the `run` options.
const CONSUL_ENV_HELP: &str = "\
Consul connection settings are not options: they come from Consul's own environment variables,
as for the consul CLI: CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE,
CONSUL_DATACENTER, CONSUL_CACERT, CONSUL_CAPATH, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY,
CONSUL_HTTP_SSL_VERIFY and CONSUL_TLS_SERVER_NAME; the token and TLS files are re-read every
ELECTOR_CREDENTIALS_RELOAD (default 5s). The client's limits use
ELECTOR_CONSUL_MAX_CONNECTIONS, ELECTOR_CONSUL_REQUEST_TIMEOUT, ELECTOR_CONSUL_CONNECT_TIMEOUT
and ELECTOR_CONSUL_RETRY_{ATTEMPTS,BASE_DELAY,MAX_DELAY}. Variables named CONSUL_ELECTOR_*
by earlier versions are still read when the ELECTOR_* one is unset.";

/// The command line as `lookup` (the process environment) completes it: an option whose
/// variable was renamed reads it under its former name when the current one is unset
/// ([`crate::env_names`]).
pub fn parse_from_env(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    lookup: impl Fn(&str) -> Option<String> + Copy,
) -> Result<Cli, clap::Error> {
    let command = Cli::command().mut_subcommand("run", |run| {
        run.mut_args(|arg| {
            let renamed = arg.get_env().and_then(|env| {
                crate::env_names::RENAMED
                    .iter()
                    .find(|(current, _)| std::ffi::OsStr::new(current) == env)
            });
            match renamed.and_then(|(current, _)| crate::env_names::read(lookup, current)) {
                Some((_, read)) => arg.env(read),
                None => arg,
            }
        })
    });
    Cli::from_arg_matches(&command.try_get_matches_from(args)?)
}

/// Instance name used when neither `--instance-name`, `POD_NAME` nor a hostname is available.
const FALLBACK_INSTANCE_NAME: &str = "consul-elector";

/// The `consul-elector` command line.
#[derive(Debug, Clone, Parser)]
#[command(name = "consul-elector", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run the operator: watch LeaderElections and pods, elect leaders through Consul.
    Run(Box<RunArgs>),
    /// Print the LeaderElection CustomResourceDefinition as YAML.
    Crd,
    /// Ask the running operator to release every LeaderElection it serves in the watched
    /// namespaces (labels off the pods, keys released, sessions destroyed, finalizer removed)
    /// and keep the objects, and wait until it has (the chart's pre-delete hook runs this
    /// before `helm uninstall` removes the operator).
    ReleaseElections(UninstallArgs),
    /// As `release-elections`, and delete the LeaderElections too.
    DeleteElections(UninstallArgs),
}

/// `--watch-namespaces`, shared by `run` and the uninstall commands.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct WatchScope {
    /// Namespaces to watch, comma-separated; empty watches all namespaces.
    #[arg(
        long,
        env = "ELECTOR_WATCH_NAMESPACES",
        value_name = "NS1,NS2",
        default_value = "",
        hide_default_value = true,
        value_parser = parse_namespaces
    )]
    pub watch_namespaces: Namespaces,
}

/// The Lease that chooses the one replica that writes; `<namespace>.<name>` names the install
/// (shared by `run` and the uninstall commands).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct LeaseName {
    /// Name of the `coordination.k8s.io` Lease that chooses the one replica that writes.
    #[arg(
        long,
        env = "ELECTOR_LEASE_NAME",
        default_value = "consul-elector",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub lease_name: String,

    /// Namespace of the Lease: the operator's own (the chart sets it from the downward API).
    /// Defaults to the namespace of the Kubernetes client's configuration.
    #[arg(long, env = "POD_NAMESPACE", value_parser = parse_namespace)]
    pub lease_namespace: Option<String>,
}

/// Options of `consul-elector release-elections` and `delete-elections`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct UninstallArgs {
    /// The namespaces whose elections to release: the operator's.
    #[command(flatten)]
    pub scope: WatchScope,

    /// The install's Lease, on which the request is written: elections whose status names
    /// another install as serving them are left alone.
    #[command(flatten)]
    pub lease: LeaseName,

    /// How long to wait, in all, for the operator to release the elections (Go duration).
    /// The operator gives up on an unreachable Consul well before the default.
    #[arg(long, default_value = "2m", value_parser = parse_positive_duration)]
    pub timeout: Duration,
}

/// Options of `consul-elector run`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[command(after_help = CONSUL_ENV_HELP)]
pub struct RunArgs {
    /// Address of the admin HTTP server (/metrics, /livez, /readyz).
    #[arg(long, env = "ELECTOR_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// The namespaces the operator serves.
    #[command(flatten)]
    pub scope: WatchScope,

    /// Log output format.
    #[arg(long, env = "ELECTOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log filter in tracing's EnvFilter syntax, for example `info,consul_elector=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "info", value_parser = parse_log_filter)]
    pub log_filter: String,

    /// Field manager name of the operator's server-side apply patches.
    #[arg(
        long,
        env = "ELECTOR_FIELD_MANAGER",
        default_value = "consul-elector",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub field_manager: String,

    /// How long one Consul blocking query on the lock keys waits for a change (Go duration, at
    /// most 10m). A query's wait is also capped at 2/5 of the shortest session TTL among the
    /// elections it watches, so that Consul confirms every key well within a TTL (rule 2
    /// fences a leader whose key went a whole TTL without an answer).
    #[arg(
        long,
        env = "ELECTOR_LOCK_WATCH_WAIT",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_lock_watch_wait
    )]
    pub lock_watch_wait: Duration,

    /// /livez fails when a reconcile has run, or the session renewer or lock watcher has been
    /// behind its schedule, for this long (Go duration).
    #[arg(
        long,
        env = "ELECTOR_LIVENESS_TIMEOUT",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_positive_duration
    )]
    pub liveness_timeout: Duration,

    /// Name of this operator instance, for logs and Kubernetes events; defaults to the
    /// hostname, which in a pod is the pod name.
    #[arg(
        long,
        env = "POD_NAME",
        default_value_t = hostname(),
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub instance_name: String,

    /// Consul addresses, besides the operator's own (`CONSUL_HTTP_ADDR`), that an election may
    /// name in `spec.consul.address`, comma-separated. Empty (the default) refuses every
    /// override. The operator's own token is never sent to these addresses: an election that
    /// names one uses the token of its `tokenSecretRef`, or none.
    #[arg(
        long,
        env = "ELECTOR_ALLOWED_ADDRESSES",
        value_name = "ADDR1,ADDR2",
        default_value = "",
        hide_default_value = true,
        value_parser = parse_addresses
    )]
    pub consul_allowed_addresses: AllowedAddresses,

    /// Consul datacenters, besides the operator's own (`CONSUL_DATACENTER`, or its agent's when
    /// unset), that an election may name in `spec.consul.datacenter` while using the
    /// operator's own token, comma-separated. Empty (the default) refuses every other
    /// datacenter to that token. An election with a token of its own (`tokenSecretRef`) may
    /// name any datacenter: Consul's ACLs then decide.
    #[arg(
        long,
        env = "ELECTOR_ALLOWED_DATACENTERS",
        value_name = "DC1,DC2",
        default_value = "",
        hide_default_value = true,
        value_parser = parse_datacenters
    )]
    pub consul_allowed_datacenters: AllowedDatacenters,

    /// This cluster's identity, carried in the names of the operator's Consul sessions and in
    /// the values of its keys, so that two clusters sharing one Consul never adopt or release
    /// each other's locks. Defaults to the UID of the `kube-system` namespace, which is stable
    /// for the life of a cluster. Lowercase letters, digits, '-' and '.', at most 63 characters.
    #[arg(long, env = "ELECTOR_CLUSTER_NAME", value_parser = parse_cluster_name)]
    pub cluster_name: Option<String>,

    /// The names this install had before a rename (a new cluster name, a new Lease name or
    /// namespace), comma-separated `<cluster>/<lease namespace>.<lease name>`: the sessions,
    /// key values and `status.servedBy` claims carrying them are this install's, so the
    /// rename changes no leader. Keep them until every election has moved once.
    #[arg(
        long,
        env = "ELECTOR_FORMER_NAMES",
        value_name = "CLUSTER/NS.LEASE,...",
        default_value = "",
        hide_default_value = true,
        value_parser = parse_former_names
    )]
    pub former_names: FormerNames,

    /// The Lease, which also names this install.
    #[command(flatten)]
    pub lease: LeaseName,

    /// How long after the active replica's last renewal a standby may take the Lease over
    /// (whole seconds, Go duration).
    #[arg(
        long,
        env = "ELECTOR_LEASE_DURATION",
        value_name = "DURATION",
        default_value = "15s",
        value_parser = parse_whole_seconds
    )]
    pub lease_duration: Duration,

    /// How long after its last successful renewal the active replica stops writing (whole
    /// seconds, shorter than the lease duration); it renews every half of it.
    #[arg(
        long,
        env = "ELECTOR_LEASE_RENEW_DEADLINE",
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_whole_seconds
    )]
    pub lease_renew_deadline: Duration,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// The namespaces to watch; empty means every namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespaces(Vec<String>);

impl Namespaces {
    /// The namespace names, in the order given; empty means every namespace.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Whether every namespace is watched.
    pub fn is_all(&self) -> bool {
        self.0.is_empty()
    }
}

/// Parses a comma-separated list: entries are trimmed, empty ones skipped, each parsed by
/// `parse`, duplicates (after parsing) dropped; the first entry `parse` refuses is the error.
fn parse_list<T: PartialEq>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut items: Vec<T> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let item = parse(entry)?;
        if !items.contains(&item) {
            items.push(item);
        }
    }
    Ok(items)
}

/// Parses `ns1,ns2` (see [`parse_list`]): each name must be a valid namespace name (an RFC
/// 1123 label).
fn parse_namespaces(text: &str) -> Result<Namespaces, String> {
    parse_list(text, |name| {
        if is_rfc1123_label(name) {
            Ok(name.to_owned())
        } else {
            Err(format!(
                "{name:?} is not a namespace name (lowercase letters, digits and '-', \
                 starting and ending with a letter or digit, at most 63 characters)"
            ))
        }
    })
    .map(Namespaces)
}

/// Whether `name` is an RFC 1123 DNS label, the syntax of namespace names.
fn is_rfc1123_label(name: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 63
        && name.starts_with(alphanumeric)
        && name.ends_with(alphanumeric)
        && name.chars().all(|c| alphanumeric(c) || c == '-')
}

/// An allowlist the admin gives on the command line: the entries in the order given, without
/// duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList<T>(Vec<T>);

impl<T> Default for AllowList<T> {
    fn default() -> Self {
        AllowList(Vec::new())
    }
}

impl<T> AllowList<T> {
    /// The entries, in the order given, without duplicates.
    pub fn entries(&self) -> &[T] {
        &self.0
    }
}

/// The Consul addresses elections may name besides the operator's own.
pub type AllowedAddresses = AllowList<ConsulAddress>;

/// Parses `addr1,addr2` (see [`parse_list`]) the way `CONSUL_HTTP_ADDR` is parsed
/// (`https://` means TLS; a bare `host:port` is plain HTTP).
fn parse_addresses(text: &str) -> Result<AllowedAddresses, String> {
    parse_list(text, |entry| ConsulAddress::parse(entry, false)).map(AllowList)
}

/// The Consul datacenters elections may name with the operator's own token besides its own.
pub type AllowedDatacenters = AllowList<String>;

/// Former names of this install, `(cluster, install)` (see [`RunArgs::former_names`]).
pub type FormerNames = AllowList<(String, String)>;

/// Parses `cluster/namespace.lease,...` (see [`parse_list`]).
fn parse_former_names(text: &str) -> Result<FormerNames, String> {
    parse_list(text, |entry| {
        let invalid = || {
            format!(
                "{entry:?} is not a former name: <cluster>/<lease namespace>.<lease name>, as \
                 status.servedBy shows it"
            )
        };
        let (cluster, install) = entry.split_once('/').ok_or_else(invalid)?;
        let cluster = parse_cluster_name(cluster)?;
        let (namespace, lease) = install.split_once('.').ok_or_else(invalid)?;
        let lease_ok = !lease.is_empty()
            && lease.len() <= 253
            && lease
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !is_rfc1123_label(namespace) || !lease_ok {
            return Err(invalid());
        }
        Ok((cluster, install.to_owned()))
    })
    .map(AllowList)
}

/// Parses `dc1,dc2` (see [`parse_list`]): each name must be a datacenter name as
/// `spec.consul.datacenter` accepts it. Names are compared exactly, as given.
fn parse_datacenters(text: &str) -> Result<AllowedDatacenters, String> {
    parse_list(text, |name| {
        if is_datacenter_name(name) {
            Ok(name.to_owned())
        } else {
            Err(format!(
                "{name:?} is not a datacenter name (1 to 64 letters, digits, '-' or '_')"
            ))
        }
    })
    .map(AllowList)
}

/// A cluster name: it becomes one segment of a Consul session name, so no '/'.
fn parse_cluster_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if name.is_empty()
        || name.len() > 63
        || !name.starts_with(alphanumeric)
        || !name.ends_with(alphanumeric)
        || !name.chars().all(allowed)
    {
        return Err(format!(
            "{name:?} is not a cluster name (lowercase letters, digits, '-' and '.', starting \
             and ending with a letter or digit, at most 63 characters)"
        ));
    }
    Ok(name.to_owned())
}

/// Checks the syntax of a log filter (kept as text: `EnvFilter` is not `Clone`).
fn parse_log_filter(text: &str) -> Result<String, String> {
    EnvFilter::try_new(text)
        .map(|_| text.to_owned())
        .map_err(|error| error.to_string())
}

/// A Go duration above zero.
fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_go_duration(text).map_err(|error| error.to_string())?;
    if duration.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(duration)
}

/// A Go duration of whole seconds, above zero (Lease timings count in seconds).
fn parse_whole_seconds(text: &str) -> Result<Duration, String> {
    let duration = parse_positive_duration(text)?;
    if duration.subsec_nanos() != 0 {
        return Err("must be whole seconds".to_owned());
    }
    Ok(duration)
}

/// One namespace name.
fn parse_namespace(text: &str) -> Result<String, String> {
    let name = text.trim();
    if is_rfc1123_label(name) {
        Ok(name.to_owned())
    } else {
        Err(format!("{text:?} is not a namespace name"))
    }
}

/// A Go duration above zero and at most Consul's longest blocking wait.
fn parse_lock_watch_wait(text: &str) -> Result<Duration, String> {
    let duration = parse_positive_duration(text)?;
    if duration > MAX_WAIT {
        return Err(format!(
            "must be at most {}s, the longest wait Consul allows",
            MAX_WAIT.as_secs()
        ));
    }
    Ok(duration)
}

/// The machine's hostname (in a pod, the pod name), or a fixed name when it is unknown.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| FALLBACK_INSTANCE_NAME.to_owned())
}

/// Why the tracing subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// The filter is not valid EnvFilter syntax.
    #[error("invalid log filter: {0}")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    /// Another global subscriber is already installed.
    #[error("cannot install the tracing subscriber: {0}")]
    Install(#[from] TryInitError),
}

/// Installs the global tracing subscriber: logs to stdout in `format`, filtered by `filter`
/// (EnvFilter syntax). Plain output is coloured only when stdout is a terminal.
pub fn init_tracing(format: LogFormat, filter: &str) -> Result<(), TracingError> {
    let builder = tracing_subscriber::fmt().with_env_filter(EnvFilter::try_new(filter)?);
    match format {
        LogFormat::Plain => builder
            .with_ansi(std::io::stdout().is_terminal())
            .finish()
            .try_init()?,
        LogFormat::Json => builder.json().finish().try_init()?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process;

    use clap::{CommandFactory, FromArgMatches};

    use super::*;

    /// Every `run` option and its environment variable.
    const ENV_VARS: [(&str, &str); 16] = [
        ("metrics_addr", "ELECTOR_METRICS_ADDR"),
        ("watch_namespaces", "ELECTOR_WATCH_NAMESPACES"),
        ("log_format", "ELECTOR_LOG_FORMAT"),
        ("log_filter", "RUST_LOG"),
        ("field_manager", "ELECTOR_FIELD_MANAGER"),
        ("lock_watch_wait", "ELECTOR_LOCK_WATCH_WAIT"),
        ("liveness_timeout", "ELECTOR_LIVENESS_TIMEOUT"),
        ("instance_name", "POD_NAME"),
        ("consul_allowed_addresses", "ELECTOR_ALLOWED_ADDRESSES"),
        ("consul_allowed_datacenters", "ELECTOR_ALLOWED_DATACENTERS"),
        ("cluster_name", "ELECTOR_CLUSTER_NAME"),
        ("former_names", "ELECTOR_FORMER_NAMES"),
        ("lease_name", "ELECTOR_LEASE_NAME"),
        ("lease_namespace", "POD_NAMESPACE"),
        ("lease_duration", "ELECTOR_LEASE_DURATION"),
        ("lease_renew_deadline", "ELECTOR_LEASE_RENEW_DEADLINE"),
    ];

    /// Parses `args` ignoring the process environment, so variables such as `RUST_LOG` or
    /// `POD_NAME` of the test run cannot change the result.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let command = Cli::command().mut_subcommand("run", |run| run.mut_args(|arg| arg.env(None)));
        Cli::from_arg_matches(&command.try_get_matches_from(args)?)
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let mut argv = vec!["consul-elector", "run"];
        argv.extend_from_slice(args);
        match parse(&argv) {
            Ok(Cli {
                command: Command::Run(run),
            }) => *run,
            other => panic!("{args:?} parsed as {other:?}"),
        }
    }

    fn run_error(args: &[&str]) -> String {
        let mut argv = vec!["consul-elector", "run"];
        argv.extend_from_slice(args);
        match parse(&argv) {
            Err(error) => error.to_string(),
            Ok(cli) => panic!("{args:?} was accepted as {cli:?}"),
        }
    }

    #[test]
    fn command_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let run = run_args(&[]);
        assert_eq!(
            run,
            RunArgs {
                metrics_addr: ([0, 0, 0, 0], 8080).into(),
                scope: WatchScope {
                    watch_namespaces: Namespaces::default(),
                },
                log_format: LogFormat::Plain,
                log_filter: "info".to_owned(),
                field_manager: "consul-elector".to_owned(),
                lock_watch_wait: Duration::from_secs(60),
                liveness_timeout: Duration::from_secs(60),
                instance_name: hostname(),
                consul_allowed_addresses: AllowedAddresses::default(),
                consul_allowed_datacenters: AllowedDatacenters::default(),
                cluster_name: None,
                former_names: FormerNames::default(),
                lease: LeaseName {
                    lease_name: "consul-elector".to_owned(),
                    lease_namespace: None,
                },
                lease_duration: Duration::from_secs(15),
                lease_renew_deadline: Duration::from_secs(10),
            }
        );
        assert!(run.scope.watch_namespaces.is_all());
        assert!(!run.instance_name.is_empty());
    }

    #[test]
    fn every_flag() {
        let run = run_args(&[
            "--metrics-addr",
            "127.0.0.1:9090",
            "--watch-namespaces",
            " shop, billing ,,shop",
            "--log-format",
            "json",
            "--log-filter",
            "warn,consul_elector=debug",
            "--field-manager",
            "elector-test",
            "--lock-watch-wait",
            "1m30s",
            "--liveness-timeout",
            "2m",
            "--instance-name",
            "consul-elector-0",
            "--consul-allowed-addresses",
            "https://consul.other:8501, consul.third:8500,,http://consul.third:8500",
            "--consul-allowed-datacenters",
            " dc2,eu_West-1,, dc2",
            "--cluster-name",
            "eu-west-1.prod",
            "--former-names",
            "eu-west-1.old/ops.consul-elector, eu-west-1.prod/elector.ha,",
            "--lease-name",
            "elector-ha",
            "--lease-namespace",
            "ops",
            "--lease-duration",
            "1m",
            "--lease-renew-deadline",
            "40s",
        ]);
        assert_eq!(
            run,
            RunArgs {
                metrics_addr: ([127, 0, 0, 1], 9090).into(),
                scope: WatchScope {
                    watch_namespaces: Namespaces(vec!["shop".to_owned(), "billing".to_owned()]),
                },
                log_format: LogFormat::Json,
                log_filter: "warn,consul_elector=debug".to_owned(),
                field_manager: "elector-test".to_owned(),
                lock_watch_wait: Duration::from_secs(90),
                liveness_timeout: Duration::from_secs(120),
                instance_name: "consul-elector-0".to_owned(),
                consul_allowed_addresses: AllowList(vec![
                    ConsulAddress::parse("https://consul.other:8501", false).expect("address"),
                    ConsulAddress::parse("http://consul.third:8500", false).expect("address"),
                ]),
                consul_allowed_datacenters: AllowList(vec![
                    "dc2".to_owned(),
                    "eu_West-1".to_owned(),
                ]),
                cluster_name: Some("eu-west-1.prod".to_owned()),
                former_names: AllowList(vec![
                    ("eu-west-1.old".to_owned(), "ops.consul-elector".to_owned()),
                    ("eu-west-1.prod".to_owned(), "elector.ha".to_owned()),
                ]),
                lease: LeaseName {
                    lease_name: "elector-ha".to_owned(),
                    lease_namespace: Some("ops".to_owned()),
                },
                lease_duration: Duration::from_secs(60),
                lease_renew_deadline: Duration::from_secs(40),
            }
        );
        assert_eq!(run.scope.watch_namespaces.names(), ["shop", "billing"]);
        assert!(!run.scope.watch_namespaces.is_all());
    }

    #[test]
    fn invalid_values_are_rejected_with_a_reason() {
        for (args, expected) in [
            (["--metrics-addr", "localhost"], "invalid socket address"),
            (
                ["--watch-namespaces", "shop,Billing"],
                "\"Billing\" is not a namespace name",
            ),
            (["--log-format", "xml"], "possible values: plain, json"),
            (["--log-filter", "consul_elector=loud"], "invalid value"),
            (["--field-manager", ""], "a value is required"),
            (["--lock-watch-wait", "15"], "invalid duration \"15\""),
            (["--lock-watch-wait", "11m"], "at most 600s"),
            (["--liveness-timeout", "0s"], "greater than zero"),
            (["--instance-name", ""], "a value is required"),
            (
                ["--consul-allowed-addresses", "ftp://consul:8500"],
                "unsupported scheme",
            ),
            (
                ["--consul-allowed-addresses", "consul:8500/v1"],
                "only scheme, host and port",
            ),
            (
                ["--consul-allowed-datacenters", "dc2,dc 3"],
                "\"dc 3\" is not a datacenter name",
            ),
            (
                ["--consul-allowed-datacenters", "dc/2"],
                "is not a datacenter name",
            ),
            (["--cluster-name", "a/b"], "is not a cluster name"),
            (["--cluster-name", "Prod"], "is not a cluster name"),
            (["--former-names", "prod"], "is not a former name"),
            (["--former-names", "prod/ops"], "is not a former name"),
            (["--former-names", "Prod/ops.ce"], "is not a cluster name"),
            (["--former-names", "prod/Ops.ce"], "is not a former name"),
            (["--lease-name", ""], "a value is required"),
            (["--lease-namespace", "Ops"], "is not a namespace name"),
            (["--lease-duration", "1500ms"], "whole seconds"),
            (["--lease-renew-deadline", "0s"], "greater than zero"),
        ] {
            let error = run_error(&args);
            assert!(error.contains(expected), "{args:?}: {error}");
        }
    }

    #[test]
    fn crd_subcommand() {
        assert!(matches!(
            parse(&["consul-elector", "crd"]),
            Ok(Cli {
                command: Command::Crd
            })
        ));
        assert!(
            parse(&["consul-elector"]).is_err(),
            "a subcommand is required"
        );
    }

    #[test]
    fn every_run_option_has_its_environment_variable() {
        let command = Cli::command();
        let run = command.find_subcommand("run").expect("the run subcommand");
        for arg in run.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            let expected = ENV_VARS
                .iter()
                .find(|(option, _)| *option == id)
                .map(|(_, var)| *var);
            assert_eq!(
                arg.get_env().and_then(|var| var.to_str()),
                expected,
                "--{id}"
            );
            assert!(arg.get_help().is_some(), "--{id} has help text");
        }
    }

    #[test]
    fn run_help_explains_where_consul_settings_come_from() {
        let mut command = Cli::command();
        let help = command
            .find_subcommand_mut("run")
            .expect("the run subcommand")
            .render_long_help()
            .to_string();
        assert!(help.contains("CONSUL_HTTP_ADDR"), "{help}");
        assert!(help.contains("[env: ELECTOR_LOCK_WATCH_WAIT="), "{help}");
    }

    /// Marks the child process of [`environment_variables_set_every_option`].
    const CHILD_MARKER: &str = "ELECTOR_CONFIG_TEST_CHILD";

    /// Environment variables are read for real in a child process (this test binary, running
    /// only this test), so the test never changes its own process environment.
    #[test]
    fn environment_variables_set_every_option() {
        if std::env::var_os(CHILD_MARKER).is_some() {
            let cli = Cli::try_parse_from(["consul-elector", "run"]);
            let Ok(Cli {
                command: Command::Run(run),
            }) = cli
            else {
                panic!("run parsed as {cli:?}");
            };
            assert_eq!(
                *run,
                RunArgs {
                    metrics_addr: ([127, 0, 0, 1], 9091).into(),
                    scope: WatchScope {
                        watch_namespaces: Namespaces(vec!["a".to_owned(), "b-2".to_owned()]),
                    },
                    log_format: LogFormat::Json,
                    log_filter: "debug".to_owned(),
                    field_manager: "env-manager".to_owned(),
                    lock_watch_wait: Duration::from_secs(5),
                    liveness_timeout: Duration::from_millis(1500),
                    instance_name: "elector-7".to_owned(),
                    consul_allowed_addresses: AllowList(vec![
                        ConsulAddress::parse("consul.b:8500", false).expect("address"),
                    ]),
                    consul_allowed_datacenters: AllowList(vec!["dc2".to_owned()]),
                    cluster_name: Some("blue".to_owned()),
                    former_names: AllowList(vec![("green".to_owned(), "ops.ce".to_owned())]),
                    lease: LeaseName {
                        lease_name: "blue-lease".to_owned(),
                        lease_namespace: Some("elector".to_owned()),
                    },
                    lease_duration: Duration::from_secs(20),
                    lease_renew_deadline: Duration::from_secs(12),
                }
            );
            // A flag wins over its variable.
            let cli = Cli::try_parse_from(["consul-elector", "run", "--log-format", "plain"]);
            assert!(
                matches!(&cli, Ok(Cli { command: Command::Run(run) }) if run.log_format == LogFormat::Plain),
                "{cli:?}"
            );
            return;
        }

        let values = [
            ("ELECTOR_METRICS_ADDR", "127.0.0.1:9091"),
            ("ELECTOR_WATCH_NAMESPACES", "a,b-2"),
            ("ELECTOR_LOG_FORMAT", "json"),
            ("RUST_LOG", "debug"),
            ("ELECTOR_FIELD_MANAGER", "env-manager"),
            ("ELECTOR_LOCK_WATCH_WAIT", "5s"),
            ("ELECTOR_LIVENESS_TIMEOUT", "1500ms"),
            ("POD_NAME", "elector-7"),
            ("ELECTOR_ALLOWED_ADDRESSES", "consul.b:8500"),
            ("ELECTOR_ALLOWED_DATACENTERS", "dc2"),
            ("ELECTOR_CLUSTER_NAME", "blue"),
            ("ELECTOR_FORMER_NAMES", "green/ops.ce"),
            ("ELECTOR_LEASE_NAME", "blue-lease"),
            ("POD_NAMESPACE", "elector"),
            ("ELECTOR_LEASE_DURATION", "20s"),
            ("ELECTOR_LEASE_RENEW_DEADLINE", "12s"),
        ];
        assert_eq!(values.map(|(var, _)| var), ENV_VARS.map(|(_, var)| var));
        let output = process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "cli::tests::environment_variables_set_every_option",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_clear()
            .envs(values)
            .env(CHILD_MARKER, "1")
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Marks the child process of [`former_variable_names_are_still_read`].
    const FORMER_CHILD_MARKER: &str = "ELECTOR_FORMER_NAMES_TEST_CHILD";

    /// Variables of earlier versions (`CONSUL_ELECTOR_*`) still set their options when the
    /// current name is unset, and lose to it when both are set; read in a child process, as
    /// above.
    #[test]
    fn former_variable_names_are_still_read() {
        if std::env::var_os(FORMER_CHILD_MARKER).is_some() {
            let lookup = |name: &str| std::env::var(name).ok();
            let cli = parse_from_env(["consul-elector", "run"].map(Into::into), lookup);
            let Ok(Cli {
                command: Command::Run(run),
            }) = cli
            else {
                panic!("run parsed as {cli:?}");
            };
            assert_eq!(run.cluster_name.as_deref(), Some("green"));
            assert_eq!(run.consul_allowed_datacenters.entries(), ["dc3".to_owned()]);
            assert_eq!(
                run.former_names.entries(),
                [("blue".to_owned(), "ops.ce".to_owned())],
                "the current name wins"
            );
            let settings = crate::consul::ConsulSettings::from_process_env().expect("settings");
            assert_eq!(settings.max_connections, 7);
            return;
        }
        let output = process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "cli::tests::former_variable_names_are_still_read",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_clear()
            .envs([
                ("CONSUL_ELECTOR_CLUSTER_NAME", "green"),
                ("CONSUL_ELECTOR_ALLOWED_DATACENTERS", "dc3"),
                ("CONSUL_ELECTOR_FORMER_NAMES", "green/ops.ce"),
                ("ELECTOR_FORMER_NAMES", "blue/ops.ce"),
                ("CONSUL_ELECTOR_MAX_CONNECTIONS", "7"),
                (FORMER_CHILD_MARKER, "1"),
            ])
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    #[test]
    fn an_empty_namespace_list_means_all_namespaces() {
        for text in ["", " ", ",", " , "] {
            assert_eq!(
                parse_namespaces(text),
                Ok(Namespaces::default()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn namespace_names_are_rfc1123_labels() {
        for name in ["a", "shop", "team-7", "0abc", &"a".repeat(63)] {
            assert!(is_rfc1123_label(name), "{name:?}");
        }
        for name in ["", "-a", "a-", "Shop", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_rfc1123_label(name), "{name:?}");
        }
    }

    #[test]
    fn init_tracing_rejects_an_invalid_filter() {
        assert!(matches!(
            init_tracing(LogFormat::Json, "consul_elector=loud"),
            Err(TracingError::Filter(_))
        ));
    }
}
