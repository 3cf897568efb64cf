//! What can stop a plugin command, with the context a user needs to act on it.

use std::time::Duration;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No Kubernetes client could be built (no kubeconfig, no in-cluster configuration).
    #[error("cannot configure a Kubernetes client (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Client(#[source] kube::Error),
    /// A Kubernetes API call failed.
    #[error("{operation}: {source}")]
    Kube {
        /// What was being done, with the object's name.
        operation: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Watching an object failed.
    #[error("{operation}: {source}")]
    Watch {
        /// What was being watched.
        operation: String,
        /// The watch error.
        #[source]
        source: kube::runtime::wait::Error,
    },
    /// `--watch` lost the watch and could not resume it.
    #[error("watching {what}: {source}")]
    WatchStream {
        /// What was being watched.
        what: String,
        /// The watcher's error.
        #[source]
        source: kube::runtime::watcher::Error,
    },
    /// The named election does not exist.
    #[error("LeaderElection {namespace}/{name} not found")]
    ElectionNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The election went away while the command waited on it.
    #[error("LeaderElection {namespace}/{name} was deleted while waiting for the switchover")]
    ElectionDeleted {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The operator did not decide a switchover in time.
    #[error(
        "the operator did not decide the switchover of {namespace}/{name} within {}s; the \
         request is still on the election (cancel it with `kubectl annotate -n {namespace} \
         leaderelection {name} {annotation}-`)",
        timeout.as_secs_f64()
    )]
    SwitchoverTimeout {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// How long the plugin waited.
        timeout: Duration,
        /// The request annotation.
        annotation: &'static str,
    },
    /// The output could not be rendered as JSON or YAML.
    #[error("cannot render the output as {format}: {detail}")]
    Render {
        /// `json` or `yaml`.
        format: &'static str,
        /// The serializer's message.
        detail: String,
    },
}

impl PluginError {
    /// A failed API call: `NotFound` of a LeaderElection becomes [`Self::ElectionNotFound`].
    pub fn election_call(
        namespace: &str,
        name: &str,
        operation: &str,
        source: kube::Error,
    ) -> Self {
        match &source {
            kube::Error::Api(status) if status.code == 404 => Self::ElectionNotFound {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
            _ => Self::Kube {
                operation: format!("{operation} LeaderElection {namespace}/{name}"),
                source,
            },
        }
    }
}
