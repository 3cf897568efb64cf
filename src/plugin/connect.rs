//! The Kubernetes client of the plugin, configured as kubectl's own flags say.

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::cli::{Cli, RequestTimeout};
use super::error::PluginError;

/// A client for `--kubeconfig` and `--context`, as kubectl reads them; without either, the
/// usual inference (`$KUBECONFIG`, `~/.kube/config`, in-cluster).
pub(super) async fn client(cli: &Cli) -> Result<Client, PluginError> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &cli.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| PluginError::Client(kube::Error::InferKubeconfig(e)))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| PluginError::Client(kube::Error::InferKubeconfig(e)))?
        }
        None if cli.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| PluginError::Client(kube::Error::InferKubeconfig(e)))?,
        None => Config::infer()
            .await
            .map_err(|e| PluginError::Client(kube::Error::InferConfig(e)))?,
    };
    if let RequestTimeout(Some(timeout)) = cli.request_timeout {
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    Client::try_from(config).map_err(PluginError::Client)
}
