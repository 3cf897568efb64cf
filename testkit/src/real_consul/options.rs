//! What a start runs: [`Shape`], [`Options`] and their [`Tls`].

use std::path::PathBuf;

/// Which Consul to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One `consul agent -dev`.
    Dev,
    /// Three servers forming one Raft cluster, and a client agent joined to them.
    Cluster,
}

/// Options of a start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// ACLs on, denying by default; [`RealConsul::master_token`](super::RealConsul::master_token)
    /// is set.
    pub acl: bool,
    /// An HTTPS port on every member besides its HTTP port; `None` (the default): HTTP only.
    pub tls: Option<Tls>,
}

/// The HTTPS listener of every member: Consul's `ports { https }`, `cert_file`, `key_file`,
/// `ca_file` and `verify_incoming_https`. Only the HTTP API uses TLS: the members' RPC and
/// gossip between themselves stay plain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The server certificate chain (PEM), valid for `127.0.0.1`.
    pub cert_file: PathBuf,
    /// The server certificate's private key (PEM).
    pub key_file: PathBuf,
    /// The CA certificates (PEM, one file) that client certificates are checked against.
    pub ca_file: PathBuf,
    /// Refuse HTTPS clients without a valid certificate from `ca_file` (Consul checks it at
    /// the TLS handshake only: a connection open before the certificate expired goes on).
    pub require_client_cert: bool,
}
