//! The election's lock as Consul sees it: read with the operator's own Consul client, set up
//! from the same environment variables (`CONSUL_HTTP_ADDR`, `CONSUL_HTTP_TOKEN`,
//! `CONSUL_HTTP_TOKEN_FILE`, `CONSUL_CACERT`, ...), and asked only when `CONSUL_HTTP_ADDR`
//! is set.

use serde::Serialize;

use super::cli::RequestTimeout;
use crate::consul::{
    ConsulAddress, ConsulClient, ConsulSettings, Overrides, QueryOptions, Tenancy,
};
use crate::crd::LeaderElection;
use crate::election::key_value::holder_from_value;

/// Who holds the election's key, as Consul answered (or why Consul was not asked).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(
    tag = "state",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ConsulHolder {
    /// Consul was not asked.
    NotAsked {
        /// Why.
        reason: String,
    },
    /// The key does not exist.
    Absent {
        /// The key.
        key: String,
    },
    /// The key exists and no session holds it.
    Free {
        /// The key.
        key: String,
        /// Its `LockIndex`.
        lock_index: u64,
    },
    /// A session holds the key.
    Held {
        /// The key.
        key: String,
        /// The holding session.
        session: String,
        /// The pod the key's value names, when it is in the operator's JSON format.
        #[serde(skip_serializing_if = "Option::is_none")]
        pod: Option<String>,
        /// Its `LockIndex`: the fencing token of this acquisition.
        lock_index: u64,
    },
    /// Consul did not answer.
    Unreadable {
        /// The key.
        key: String,
        /// The error.
        error: String,
    },
}

impl ConsulHolder {
    /// One line for the table output.
    pub fn summary(&self) -> String {
        match self {
            Self::NotAsked { reason } => format!("not asked ({reason})"),
            Self::Absent { key } => format!("key {key} does not exist"),
            Self::Free { key, lock_index } => {
                format!("key {key} is free (lock index {lock_index})")
            }
            Self::Held {
                key,
                session,
                pod,
                lock_index,
            } => {
                let pod = pod.as_deref().unwrap_or("a pod the value does not name");
                format!("{pod} (session {session}, lock index {lock_index}, key {key})")
            }
            Self::Unreadable { key, error } => format!("cannot read key {key}: {error}"),
        }
    }
}

/// The Consul client for the plugin: `None` when `CONSUL_HTTP_ADDR` is not set (the plugin
/// then shows what Kubernetes says only), an error when the variables cannot be used.
/// `request_timeout` bounds each request when given.
pub fn client_from_env(request_timeout: RequestTimeout) -> Result<Option<ConsulClient>, String> {
    let address_set = std::env::var("CONSUL_HTTP_ADDR").is_ok_and(|a| !a.trim().is_empty());
    if !address_set {
        return Ok(None);
    }
    let mut settings = ConsulSettings::from_process_env().map_err(|e| e.to_string())?;
    if let RequestTimeout(Some(timeout)) = request_timeout {
        settings.request_timeout = timeout;
        settings.connect_timeout = settings.connect_timeout.min(timeout);
    }
    // A command line tool answers now or says it could not: no retry rounds.
    ConsulClient::new(&settings)
        .map(|client| Some(client.without_retries()))
        .map_err(|e| e.to_string())
}

/// The Consul key of `election`: the one the operator acts with (`status.applied.key`), else
/// the spec's, else the default.
pub fn election_key(election: &LeaderElection) -> String {
    let applied = election
        .status
        .as_ref()
        .and_then(|s| s.applied.as_ref())
        .map(|a| a.key.clone());
    applied
        .or_else(|| election.spec.key.clone())
        .unwrap_or_else(|| {
            crate::crd::default_key(
                election.metadata.namespace.as_deref().unwrap_or_default(),
                election.metadata.name.as_deref().unwrap_or_default(),
            )
        })
}

/// Reads `election`'s key through `client` (`None`: Consul is not asked). An election that
/// talks to another Consul address than `CONSUL_HTTP_ADDR` is not asked either: the answer
/// would be about another server's key.
pub async fn read(client: Option<&ConsulClient>, election: &LeaderElection) -> ConsulHolder {
    let Some(client) = client else {
        return ConsulHolder::NotAsked {
            reason: "CONSUL_HTTP_ADDR is not set".to_owned(),
        };
    };
    let applied = election.status.as_ref().and_then(|s| s.applied.as_ref());
    let spec = election.spec.consul.as_ref();
    let own_address = applied
        .and_then(|a| a.consul_address.clone())
        .or_else(|| spec.and_then(|c| c.address.clone()));
    if let Some(address) = own_address
        && ConsulAddress::parse(&address, false).ok().as_ref() != Some(client.address())
    {
        return ConsulHolder::NotAsked {
            reason: format!("the election uses Consul at {address}, not CONSUL_HTTP_ADDR"),
        };
    }
    let datacenter = applied
        .and_then(|a| a.datacenter.clone())
        .or_else(|| spec.and_then(|c| c.datacenter.clone()));
    let tenancy = Tenancy {
        namespace: applied
            .and_then(|a| a.consul_namespace.clone())
            .or_else(|| spec.and_then(|c| c.namespace.clone())),
        partition: applied
            .and_then(|a| a.consul_partition.clone())
            .or_else(|| spec.and_then(|c| c.partition.clone())),
    };
    let key = election_key(election);
    let entry = match client.with_overrides(Overrides {
        datacenter,
        tenancy,
        ..Overrides::default()
    }) {
        Ok(handle) => handle.kv_get(&key, QueryOptions::default()).await,
        Err(error) => Err(error),
    };
    match entry {
        Err(error) => ConsulHolder::Unreadable {
            key,
            error: error.to_string(),
        },
        Ok(answer) => match answer.value {
            None => ConsulHolder::Absent { key },
            Some(pair) => match pair.session {
                None => ConsulHolder::Free {
                    key,
                    lock_index: pair.lock_index,
                },
                Some(session) => ConsulHolder::Held {
                    key,
                    session,
                    pod: holder_from_value(&pair.value).map(|h| h.pod),
                    lock_index: pair.lock_index,
                },
            },
        },
    }
}
