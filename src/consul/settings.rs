//! Client configuration, read from the same environment variables as Consul's own CLI and Go
//! client, plus a few of ours for the settings Consul has no variable for.
//!
//! | Variable | Meaning |
//! |---|---|
//! | `CONSUL_HTTP_ADDR` | `host:port`, `http://host:port`, `https://host:port` or `unix:///path/to/agent.sock` (default `127.0.0.1:8500`) |
//! | `CONSUL_HTTP_SSL` | `true`: use TLS for an address without a scheme (and never downgrade `http://`) |
//! | `CONSUL_HTTP_TOKEN` | ACL token |
//! | `CONSUL_HTTP_TOKEN_FILE` | file holding the ACL token (trimmed); wins over `CONSUL_HTTP_TOKEN`, as in Consul's Go client. Re-read while the operator runs (see below) |
//! | `CONSUL_CACERT` | PEM file with the CA certificate(s) to trust instead of the system roots. Re-read while the operator runs |
//! | `CONSUL_CAPATH` | directory of PEM CA certificates (added to `CONSUL_CACERT`). Re-read while the operator runs |
//! | `CONSUL_CLIENT_CERT`, `CONSUL_CLIENT_KEY` | PEM client certificate chain and private key (mutual TLS). Re-read while the operator runs |
//! | `CONSUL_HTTP_SSL_VERIFY` | `false`: do not verify the server certificate |
//! | `CONSUL_TLS_SERVER_NAME` | name to send as SNI and to verify the certificate against |
//! | `CONSUL_DATACENTER` | datacenter for every request (`?dc=`). **Not read by Consul itself**, which only has a `-datacenter` flag; ours. |
//! | `CONSUL_NAMESPACE` | Consul Enterprise namespace for every request (`?ns=`), as Consul's CLI reads it |
//! | `CONSUL_PARTITION` | Consul Enterprise admin partition for every request (`?partition=`), as Consul's CLI reads it |
//! | `ELECTOR_CONSUL_MAX_CONNECTIONS` | cap on in-flight requests per Consul address, split into lanes: half for blocking queries, a quarter for session requests, the rest for everything else (default 64, at least 3) |
//! | `ELECTOR_CONSUL_REQUEST_TIMEOUT` | timeout of a non-blocking request, and slack added to blocking ones (Go duration, default `10s`) |
//! | `ELECTOR_CONSUL_CONNECT_TIMEOUT` | TCP + TLS connect timeout (default `5s`) |
//! | `ELECTOR_CONSUL_RETRY_ATTEMPTS` | attempts per request for retryable errors (default 4) |
//! | `ELECTOR_CONSUL_RETRY_BASE_DELAY`, `ELECTOR_CONSUL_RETRY_MAX_DELAY` | backoff bounds (default `100ms`, `5s`) |
//! | `ELECTOR_CREDENTIALS_RELOAD` | how often the token file and the TLS files are re-read (Go duration, default `5s`, at least `100ms`) |
//!
//! Booleans accept what Go's `strconv.ParseBool` accepts. Empty variables count as unset.
//!
//! # Rotated credentials
//!
//! The token file and the TLS files are read at start (a missing or unusable file fails the
//! start) and then again while the operator runs, so a token rewritten by Vault agent or a
//! certificate rotated by cert-manager (a Secret mount swaps its files atomically) is used
//! without a restart and without a leader change. A file is re-read at most once per
//! `ELECTOR_CREDENTIALS_RELOAD`, at the first Consul request after that period, and
//! at once when Consul refuses the token (`ACL not found`, `Permission denied`: the request is
//! then sent again once if the file holds a new token) or, with TLS, when a request fails (a
//! refused certificate included). New contents
//! that cannot be used (an empty or half-written file, a key that does not match its
//! certificate) never replace the working ones: the operator keeps what it has, counts the
//! failure in `consul_elector_consul_credential_reloads_total`, and tries again at the next
//! period. New TLS material applies to new connections; open ones are kept.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::go_duration;
use super::reload::DEFAULT_RELOAD_PERIOD;
use super::retry::RetryPolicy;
use super::token::ConsulToken;

/// The shortest `ELECTOR_CREDENTIALS_RELOAD`: reading the files more often buys
/// nothing (a refused token or a failed handshake has them re-read at once anyway).
const MIN_RELOAD_PERIOD: Duration = Duration::from_millis(100);

/// Consul's default HTTP address.
const DEFAULT_ADDRESS: &str = "127.0.0.1:8500";

/// The address of a Consul HTTP API: scheme, host and port.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ConsulAddress {
    tls: bool,
    host: String,
    port: u16,
    /// A Unix socket to connect to instead of `host:port`.
    socket: Option<PathBuf>,
}

/// Host and port of the URLs of requests sent over a Unix socket (Consul ignores them).
const UNIX_SOCKET_HOST: (&str, u16) = ("localhost", 80);

impl ConsulAddress {
    /// Parses an address the way Consul's Go client does: `https://` means TLS, `http://` and
    /// a bare `host:port` mean plain HTTP unless `force_tls` (`CONSUL_HTTP_SSL=true`) is set.
    /// Without a port, the scheme's default port is used. Paths, queries and credentials are
    /// rejected. `unix:///absolute/path` is an agent's Unix socket, spoken to in plain HTTP.
    pub fn parse(address: &str, force_tls: bool) -> Result<Self, String> {
        let address = address.trim();
        if let Some(path) = address.strip_prefix("unix://") {
            return Self::unix(path);
        }
        let (tls, rest) = match address.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (force_tls, rest),
            Some((scheme, _)) => return Err(format!("unsupported scheme {scheme:?}")),
            None => (force_tls, address),
        };
        let scheme = if tls { "https" } else { "http" };
        let url = url::Url::parse(&format!("{scheme}://{rest}"))
            .map_err(|error| format!("invalid address {address:?}: {error}"))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials are not allowed in the address".to_owned());
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "invalid address {address:?}: only scheme, host and port are allowed"
            ));
        }
        let host = url
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| format!("invalid address {address:?}: missing host"))?;
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("invalid address {address:?}: missing port"))?;
        Ok(Self {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            socket: None,
        })
    }

    /// The Unix socket at `path`, which must be absolute.
    fn unix(path: &str) -> Result<Self, String> {
        let socket = PathBuf::from(path);
        if !socket.is_absolute() {
            return Err(format!(
                "invalid address \"unix://{path}\": the socket path must be absolute"
            ));
        }
        let (host, port) = UNIX_SOCKET_HOST;
        Ok(Self {
            tls: false,
            host: host.to_owned(),
            port,
            socket: Some(socket),
        })
    }

    /// The Unix socket connections go to, for a `unix://` address.
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.socket.as_deref()
    }

    /// Whether connections use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Host name or IP address (IPv6 without brackets); `localhost` for a Unix socket.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// TCP port (80 for a Unix socket).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `Host` header value (`host:port`, IPv6 in brackets).
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for ConsulAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(socket) = &self.socket {
            return write!(f, "unix://{}", socket.display());
        }
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority())
    }
}

impl fmt::Debug for ConsulAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConsulAddress({self})")
    }
}

/// TLS options (used only for `https` addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file of CA certificates to trust instead of the system roots.
    pub ca_cert: Option<PathBuf>,
    /// Directory of PEM CA certificates to trust instead of the system roots.
    pub ca_path: Option<PathBuf>,
    /// PEM client certificate chain.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub client_key: Option<PathBuf>,
    /// `false` accepts any server certificate (`CONSUL_HTTP_SSL_VERIFY=false`).
    pub verify: bool,
    /// Name sent as SNI and checked against the certificate instead of the address's host.
    /// Applies to the configured default address only, not to per-election overrides.
    pub server_name: Option<String>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            ca_cert: None,
            ca_path: None,
            client_cert: None,
            client_key: None,
            verify: true,
            server_name: None,
        }
    }
}

/// Pacing of blocking-query loops (see [`super::blocking::BlockingWatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchPacing {
    /// How many re-queries may run back to back.
    pub burst: u32,
    /// One more re-query is allowed per interval.
    pub refill_interval: Duration,
}

impl Default for WatchPacing {
    fn default() -> Self {
        Self {
            burst: 4,
            refill_interval: Duration::from_millis(50),
        }
    }
}

/// Everything the Consul client needs. `Debug` never shows the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsulSettings {
    /// Default Consul HTTP address.
    pub address: ConsulAddress,
    /// Default datacenter (`?dc=`); `None` uses the agent's.
    pub datacenter: Option<String>,
    /// Default Consul Enterprise namespace and admin partition.
    pub tenancy: Tenancy,
    /// Default ACL token; `None` uses the agent's default token. When `token_file` is set,
    /// the token read at start (and the token used while the file is empty at start).
    pub token: Option<ConsulToken>,
    /// The file the token is re-read from while the client runs (`CONSUL_HTTP_TOKEN_FILE`).
    pub token_file: Option<PathBuf>,
    /// How often the token file and the TLS files are re-read.
    pub credentials_reload: Duration,
    /// TLS options.
    pub tls: TlsSettings,
    /// Cap on in-flight requests (and so HTTP/1 connections) per Consul address, split
    /// between blocking queries, session requests and the rest (see the transport's lanes);
    /// values below 3 count as 3.
    pub max_connections: usize,
    /// Timeout of a non-blocking request; blocking requests get `wait + wait/16` plus this.
    pub request_timeout: Duration,
    /// Timeout of TCP connect plus TLS and HTTP handshakes.
    pub connect_timeout: Duration,
    /// Idle connections older than this are closed instead of reused.
    pub idle_timeout: Duration,
    /// Retries of retryable errors.
    pub retry: RetryPolicy,
    /// Pacing of blocking-query loops.
    pub watch_pacing: WatchPacing,
    /// Addresses besides `address` that per-election overrides may name (see
    /// [`super::ConsulClient::with_overrides`]); empty refuses every other address.
    pub allowed_addresses: Vec<ConsulAddress>,
    /// Datacenters besides `datacenter` that per-election overrides may name while using the
    /// operator's own token (see [`super::ConsulClient::allowed_datacenters`]); empty refuses
    /// every other datacenter to that token.
    pub allowed_datacenters: Vec<String>,
}

impl Default for ConsulSettings {
    fn default() -> Self {
        Self {
            address: ConsulAddress {
                tls: false,
                host: "127.0.0.1".to_owned(),
                port: 8500,
                socket: None,
            },
            datacenter: None,
            tenancy: Tenancy::default(),
            token: None,
            token_file: None,
            credentials_reload: DEFAULT_RELOAD_PERIOD,
            tls: TlsSettings::default(),
            max_connections: 64,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(90),
            retry: RetryPolicy::default(),
            watch_pacing: WatchPacing::default(),
            allowed_addresses: Vec::new(),
            allowed_datacenters: Vec::new(),
        }
    }
}

/// Where in a Consul Enterprise cluster requests go: a namespace (`?ns=`) and an admin
/// partition (`?partition=`). Consul CE refuses both (400), so neither is sent unless set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tenancy {
    /// The namespace (`None`: the token's, else `default`).
    pub namespace: Option<String>,
    /// The admin partition (`None`: the token's, else `default`).
    pub partition: Option<String>,
}

impl Tenancy {
    /// This tenancy with each part `over` sets instead of its own; empty parts are unset.
    pub fn overridden_by(&self, over: Tenancy) -> Tenancy {
        let set = |value: Option<String>| value.filter(|v| !v.is_empty());
        Tenancy {
            namespace: set(over.namespace).or_else(|| self.namespace.clone()),
            partition: set(over.partition).or_else(|| self.partition.clone()),
        }
    }

    /// The query parameters that carry it.
    pub fn query(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let namespace = self.namespace.iter().map(|ns| ("ns", ns.as_str()));
        let partition = self.partition.iter().map(|p| ("partition", p.as_str()));
        partition.chain(namespace)
    }
}

/// A variable that could not be used. The message never contains a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct SettingsError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConsulSettings {
    /// Reads the settings from the process environment.
    pub fn from_process_env() -> Result<Self, SettingsError> {
        Self::from_env(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (variable name to value), so tests can pass a map.
    /// Reads `CONSUL_HTTP_TOKEN_FILE` from disk when it is set.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let defaults = Self::default();

        let force_tls = get("CONSUL_HTTP_SSL")
            .map(|v| parse_bool("CONSUL_HTTP_SSL", &v))
            .transpose()?
            .unwrap_or(false);
        let address_text = get("CONSUL_HTTP_ADDR").unwrap_or_else(|| DEFAULT_ADDRESS.to_owned());
        let address =
            ConsulAddress::parse(&address_text, force_tls).map_err(|message| SettingsError {
                variable: "CONSUL_HTTP_ADDR",
                message,
            })?;

        let token_file = get("CONSUL_HTTP_TOKEN_FILE");
        let token = match &token_file {
            Some(path) => read_token_file(path)?,
            None => None,
        }
        .or_else(|| get("CONSUL_HTTP_TOKEN").and_then(ConsulToken::new));

        let path = |name: &str| get(name).map(PathBuf::from);
        let tls = TlsSettings {
            ca_cert: path("CONSUL_CACERT"),
            ca_path: path("CONSUL_CAPATH"),
            client_cert: path("CONSUL_CLIENT_CERT"),
            client_key: path("CONSUL_CLIENT_KEY"),
            verify: get("CONSUL_HTTP_SSL_VERIFY")
                .map(|v| parse_bool("CONSUL_HTTP_SSL_VERIFY", &v))
                .transpose()?
                .unwrap_or(true),
            server_name: get("CONSUL_TLS_SERVER_NAME").map(|name| name.trim().to_owned()),
        };
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            return Err(SettingsError {
                variable: "CONSUL_CLIENT_CERT",
                message: "CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY must be set together".into(),
            });
        }

        // The operator's own variables, read under their former names too (`env_names`).
        let own = |name: &'static str| crate::env_names::read(&lookup, name);
        let duration = |name: &'static str, default: Duration| {
            own(name).map_or(Ok(default), |(v, variable)| {
                go_duration::parse(&v).map_err(|error| SettingsError {
                    variable,
                    message: error.to_string(),
                })
            })
        };
        let number = |name: &'static str, default: u32| {
            own(name).map_or(Ok(default), |(v, variable)| {
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| SettingsError {
                        variable,
                        message: format!("expected a positive integer, got {v:?}"),
                    })
            })
        };
        let max_connections = number(
            "ELECTOR_CONSUL_MAX_CONNECTIONS",
            u32::try_from(defaults.max_connections).unwrap_or(u32::MAX),
        )?;
        let retry = RetryPolicy {
            max_attempts: number("ELECTOR_CONSUL_RETRY_ATTEMPTS", defaults.retry.max_attempts)?,
            base_delay: duration("ELECTOR_CONSUL_RETRY_BASE_DELAY", defaults.retry.base_delay)?,
            max_delay: duration("ELECTOR_CONSUL_RETRY_MAX_DELAY", defaults.retry.max_delay)?,
        };

        let credentials_reload =
            duration("ELECTOR_CREDENTIALS_RELOAD", defaults.credentials_reload)?;
        if credentials_reload < MIN_RELOAD_PERIOD {
            return Err(SettingsError {
                variable: "ELECTOR_CREDENTIALS_RELOAD",
                message: format!("must be at least {MIN_RELOAD_PERIOD:?}"),
            });
        }

        Ok(Self {
            address,
            datacenter: get("CONSUL_DATACENTER").map(|dc| dc.trim().to_owned()),
            tenancy: Tenancy::default().overridden_by(Tenancy {
                namespace: get("CONSUL_NAMESPACE").map(|ns| ns.trim().to_owned()),
                partition: get("CONSUL_PARTITION").map(|p| p.trim().to_owned()),
            }),
            token,
            token_file: token_file.map(PathBuf::from),
            credentials_reload,
            tls,
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            request_timeout: duration("ELECTOR_CONSUL_REQUEST_TIMEOUT", defaults.request_timeout)?,
            connect_timeout: duration("ELECTOR_CONSUL_CONNECT_TIMEOUT", defaults.connect_timeout)?,
            retry,
            ..defaults
        })
    }
}

/// Reads and trims a token file. An empty file means "no token" (Consul's Go client then
/// falls back to `CONSUL_HTTP_TOKEN`).
fn read_token_file(path: &str) -> Result<Option<ConsulToken>, SettingsError> {
    let contents = std::fs::read_to_string(path).map_err(|error| SettingsError {
        variable: "CONSUL_HTTP_TOKEN_FILE",
        message: format!("cannot read {path:?}: {}", error.kind()),
    })?;
    Ok(ConsulToken::new(contents))
}

/// Go's `strconv.ParseBool`.
fn parse_bool(variable: &'static str, value: &str) -> Result<bool, SettingsError> {
    match value.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(SettingsError {
            variable,
            message: format!("expected a boolean, got {other:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<ConsulSettings, SettingsError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ConsulSettings::from_env(|name| map.get(name).cloned())
    }

    fn address(vars: &[(&str, &str)]) -> String {
        settings(vars).unwrap().address.to_string()
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, ConsulSettings::default());
        assert_eq!(s.address.to_string(), "http://127.0.0.1:8500");
        assert_eq!(s.max_connections, 64);
        assert_eq!(s.credentials_reload, Duration::from_secs(5));
        assert_eq!(s.token_file, None);
        assert!(s.tls.verify);
    }

    #[test]
    fn scheme_rules() {
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "consul:8500")]),
            "http://consul:8500"
        );
        assert_eq!(
            address(&[
                ("CONSUL_HTTP_ADDR", "consul:8501"),
                ("CONSUL_HTTP_SSL", "true")
            ]),
            "https://consul:8501"
        );
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "https://consul:8501")]),
            "https://consul:8501"
        );
        assert_eq!(
            address(&[
                ("CONSUL_HTTP_ADDR", "https://consul:8501"),
                ("CONSUL_HTTP_SSL", "0")
            ]),
            "https://consul:8501"
        );
        // Like Consul's Go client: an explicit TLS request is never downgraded by `http://`.
        assert_eq!(
            address(&[
                ("CONSUL_HTTP_ADDR", "http://consul:8500"),
                ("CONSUL_HTTP_SSL", "1")
            ]),
            "https://consul:8500"
        );
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "https://consul")]),
            "https://consul:443"
        );
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "[::1]:8500")]),
            "http://[::1]:8500"
        );
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "")]),
            "http://127.0.0.1:8500"
        );
        assert_eq!(
            address(&[("CONSUL_HTTP_ADDR", "unix:///run/consul/agent.sock")]),
            "unix:///run/consul/agent.sock"
        );
        let unix = settings(&[
            ("CONSUL_HTTP_ADDR", "unix:///run/consul/agent.sock"),
            ("CONSUL_HTTP_SSL", "true"),
        ])
        .unwrap()
        .address;
        assert_eq!(
            unix.unix_socket(),
            Some(std::path::Path::new("/run/consul/agent.sock"))
        );
        assert!(!unix.is_tls());
        assert_eq!(
            ConsulAddress::parse(&unix.to_string(), false).unwrap(),
            unix,
            "round trip"
        );
        for bad in [
            "unix://relative.sock",
            "unix://",
            "http://consul:8500/v1",
            "http://u:p@consul:1",
            "http://:1",
        ] {
            let error = settings(&[("CONSUL_HTTP_ADDR", bad)]).unwrap_err();
            assert_eq!(error.variable, "CONSUL_HTTP_ADDR", "{bad}");
        }
        let error = settings(&[("CONSUL_HTTP_SSL", "yes")]).unwrap_err();
        assert_eq!(error.variable, "CONSUL_HTTP_SSL");
    }

    #[test]
    fn every_variable() {
        let s = settings(&[
            ("CONSUL_HTTP_ADDR", "https://consul.consul.svc:8501"),
            ("CONSUL_HTTP_TOKEN", "tok"),
            ("CONSUL_CACERT", "/etc/consul/ca.pem"),
            ("CONSUL_CAPATH", "/etc/consul/cas"),
            ("CONSUL_CLIENT_CERT", "/etc/consul/tls.crt"),
            ("CONSUL_CLIENT_KEY", "/etc/consul/tls.key"),
            ("CONSUL_HTTP_SSL_VERIFY", "false"),
            ("CONSUL_TLS_SERVER_NAME", "server.dc1.consul"),
            ("CONSUL_DATACENTER", "dc2"),
            ("CONSUL_NAMESPACE", " team-a "),
            ("CONSUL_PARTITION", "  "),
            ("ELECTOR_CONSUL_MAX_CONNECTIONS", "8"),
            ("ELECTOR_CONSUL_REQUEST_TIMEOUT", "3s"),
            ("ELECTOR_CONSUL_CONNECT_TIMEOUT", "1500ms"),
            ("ELECTOR_CONSUL_RETRY_ATTEMPTS", "6"),
            ("ELECTOR_CONSUL_RETRY_BASE_DELAY", "50ms"),
            ("ELECTOR_CONSUL_RETRY_MAX_DELAY", "2s"),
            ("ELECTOR_CREDENTIALS_RELOAD", "1500ms"),
        ])
        .unwrap();
        assert!(s.address.is_tls());
        assert_eq!(s.address.host(), "consul.consul.svc");
        assert_eq!(s.address.port(), 8501);
        assert_eq!(s.token, ConsulToken::new("tok"));
        assert_eq!(s.tls.ca_cert, Some(PathBuf::from("/etc/consul/ca.pem")));
        assert_eq!(s.tls.ca_path, Some(PathBuf::from("/etc/consul/cas")));
        assert_eq!(
            s.tls.client_cert,
            Some(PathBuf::from("/etc/consul/tls.crt"))
        );
        assert_eq!(s.tls.client_key, Some(PathBuf::from("/etc/consul/tls.key")));
        assert!(!s.tls.verify);
        assert_eq!(s.tls.server_name.as_deref(), Some("server.dc1.consul"));
        assert_eq!(s.datacenter.as_deref(), Some("dc2"));
        let tenancy = Tenancy {
            namespace: Some("team-a".into()),
            partition: None,
        };
        assert_eq!(s.tenancy, tenancy, "trimmed; blank is unset");
        assert_eq!(s.max_connections, 8);
        assert_eq!(s.request_timeout, Duration::from_secs(3));
        assert_eq!(s.connect_timeout, Duration::from_millis(1500));
        assert_eq!(s.credentials_reload, Duration::from_millis(1500));
        assert_eq!(
            s.retry,
            RetryPolicy {
                max_attempts: 6,
                base_delay: Duration::from_millis(50),
                max_delay: Duration::from_secs(2),
            }
        );
    }

    #[test]
    fn rejects_bad_values() {
        for (variable, value) in [
            ("ELECTOR_CONSUL_MAX_CONNECTIONS", "0"),
            ("ELECTOR_CONSUL_MAX_CONNECTIONS", "many"),
            ("ELECTOR_CONSUL_REQUEST_TIMEOUT", "10"),
            ("ELECTOR_CONSUL_RETRY_ATTEMPTS", "-1"),
            ("CONSUL_HTTP_SSL_VERIFY", "maybe"),
            ("ELECTOR_CREDENTIALS_RELOAD", "10ms"),
            ("ELECTOR_CREDENTIALS_RELOAD", "soon"),
        ] {
            let error = settings(&[(variable, value)]).unwrap_err();
            assert_eq!(error.variable, variable);
        }
        let error = settings(&[("CONSUL_CLIENT_CERT", "/c.pem")]).unwrap_err();
        assert!(error.message.contains("together"));
    }

    #[test]
    fn token_file_wins_and_is_trimmed() {
        let dir = std::env::temp_dir().join(format!("consul-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "  file-token\n").unwrap();
        let path = file.to_str().unwrap();

        let s = settings(&[
            ("CONSUL_HTTP_TOKEN_FILE", path),
            ("CONSUL_HTTP_TOKEN", "env-token"),
        ])
        .unwrap();
        assert_eq!(s.token, ConsulToken::new("file-token"));
        assert_eq!(s.token_file.as_deref(), Some(file.as_path()));

        std::fs::write(&file, "\n").unwrap();
        let s = settings(&[
            ("CONSUL_HTTP_TOKEN_FILE", path),
            ("CONSUL_HTTP_TOKEN", "env-token"),
        ])
        .unwrap();
        assert_eq!(s.token, ConsulToken::new("env-token"));

        let missing = dir.join("missing");
        let error = settings(&[("CONSUL_HTTP_TOKEN_FILE", missing.to_str().unwrap())]).unwrap_err();
        assert_eq!(error.variable, "CONSUL_HTTP_TOKEN_FILE");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn debug_hides_the_token() {
        let s = settings(&[("CONSUL_HTTP_TOKEN", "super-secret-token")]).unwrap();
        assert!(!format!("{s:?}").contains("super-secret-token"));
    }
}
