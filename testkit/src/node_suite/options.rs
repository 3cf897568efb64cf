//! What to run the suite with: [`SuiteOptions`].

use std::path::PathBuf;
use std::time::Duration;

/// What to run the suite with.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// Image archives to import (every `*.tar` of a directory, see
    /// [`archives_in`](super::archives_in)).
    pub images: Vec<PathBuf>,
    /// The operator's image, as the chart's `image.repository` and `image.tag`.
    pub operator_image: (String, String),
    /// The dev Consul's image, as the chart's `consulDev.image.repository` and `.tag`.
    pub consul_image: (String, String),
    /// Where the cluster's and the node's logs go (kept after the run).
    pub log_dir: PathBuf,
    /// kube-proxy's `iptables.minSyncPeriod`; `None`: its default.
    pub proxy_min_sync_period: Option<Duration>,
}
