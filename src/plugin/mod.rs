//! The `kubectl elector` plugin: look at elections and move their leadership from a
//! terminal. The binary (`src/bin/kubectl-elector.rs`) parses [`Cli`] and calls [`run`].
//!
//! - [`cli`]: the command line.
//! - [`status`]: leader, token, candidates, last switchover, and [`consul_holder`]: the key
//!   as Consul sees it.
//! - [`switchover`]: the request annotation and the wait for the operator's decision.
//! - [`why`]: why a pod leads or does not.
//! - [`history`]: the election's events.
//! - [`watch`]: `list --watch` and `status --watch`.
//! - `pause` and `resume`: `spec.paused`.
//! - [`output`]: tables, JSON and YAML.
//! - [`complete`]: completion through kubectl (`kubectl_complete-elector`).

pub mod cli;
pub mod complete;
mod connect;
pub mod consul_holder;
pub mod error;
pub mod history;
pub mod output;
pub mod status;
pub mod switchover;
pub mod watch;
pub mod why;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

pub use cli::{Cli, Command, OutputFormat, RequestTimeout};
pub use error::PluginError;

use crate::crd::{LeaderElection, Mode};

/// What a command printed and whether it reached its goal (a refused switchover did not:
/// the process exits non-zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The output, for standard output.
    pub text: String,
    /// `false` makes the process exit non-zero.
    pub success: bool,
}

/// Runs `cli`'s command against the cluster of the kubeconfig (or the pod's service account
/// in a cluster).
pub async fn run(cli: Cli) -> Result<Report, PluginError> {
    if let Command::Completion { shell } = cli.command {
        // Needs no cluster.
        return Ok(Report {
            text: cli::completion(shell),
            success: true,
        });
    }
    let client = connect::client(&cli).await?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let format = cli.output;
    let now = Timestamp::now();
    let done = |text: String| Report {
        text,
        success: true,
    };
    match cli.command {
        Command::Status {
            election,
            all_namespaces,
            ..
        } => {
            let scope = status_scope(election.as_deref(), all_namespaces, &namespace);
            let consul = consul_holder::client_from_env(cli.request_timeout);
            let views = match &consul {
                Ok(client_or_none) => {
                    status::collect(client, scope, client_or_none.as_ref()).await?
                }
                Err(problem) => {
                    // Kubernetes' view is still worth showing; say why Consul was not asked.
                    let mut views = status::collect(client, scope, None).await?;
                    for view in &mut views {
                        view.consul = consul_holder::ConsulHolder::NotAsked {
                            reason: format!("invalid Consul settings: {problem}"),
                        };
                    }
                    views
                }
            };
            let text = match (&election, format) {
                // One named election is an object in JSON and YAML, like `kubectl get x`.
                (Some(_), OutputFormat::Json | OutputFormat::Yaml) if views.len() == 1 => {
                    output::render(
                        format,
                        &views[0],
                        |v| vec![v.name.clone()],
                        |v| v.render(now),
                    )?
                }
                _ => output::render(format, views.as_slice(), status::names, |v| {
                    status::render_all(v, now)
                })?,
            };
            Ok(done(text))
        }
        Command::Switchover {
            election,
            to,
            timeout,
        } => {
            let outcome =
                switchover::request(client, &namespace, &election, to.as_deref(), timeout).await?;
            let text = output::render(
                format,
                &outcome,
                |_| vec![election.clone()],
                switchover::SwitchoverOutcome::render,
            )?;
            Ok(Report {
                text,
                success: outcome.completed(),
            })
        }
        Command::Why { election, pod } => {
            let le = get_election(&client, &namespace, &election).await?;
            let pods: Api<Pod> = Api::namespaced(client, &namespace);
            let found = pods
                .get_opt(&pod)
                .await
                .map_err(|source| PluginError::Kube {
                    operation: format!("get pod {namespace}/{pod}"),
                    source,
                })?;
            let answer = why::explain(&le, &pod, found.as_ref());
            let text = output::render(
                format,
                &answer,
                |_| vec![election.clone()],
                |a| format!("{}: {}\n", a.pod, a.explanation),
            )?;
            Ok(done(text))
        }
        Command::List { all_namespaces, .. } => {
            let scope = list_scope(all_namespaces, &namespace);
            let views = status::collect(client, scope, None).await?;
            let columns = status::Columns {
                all_namespaces,
                wide: (format == OutputFormat::Wide).then_some(now),
            };
            let text = output::render(format, views.as_slice(), status::names, |v| {
                status::render_list(v, columns)
            })?;
            Ok(done(text))
        }
        Command::Completion { shell } => Ok(done(cli::completion(shell))),
        Command::Pause { election } => {
            let text = set_paused(&client, &namespace, &election, true).await?;
            Ok(done(said_or_named(format, text, election)))
        }
        Command::Resume { election } => {
            let text = set_paused(&client, &namespace, &election, false).await?;
            Ok(done(said_or_named(format, text, election)))
        }
        Command::History { election, events } => {
            let le = get_election(&client, &namespace, &election).await?;
            let named = || vec![election.clone()];
            let text = if events {
                let entries = history::entries(&history::events(client, &le).await?);
                output::render(
                    format,
                    entries.as_slice(),
                    |_| named(),
                    |e| history::render(e, now),
                )?
            } else {
                let leaderships = history::leaderships(&le);
                output::render(
                    format,
                    leaderships,
                    |_| named(),
                    |l| history::render_leaderships(l, now),
                )?
            };
            Ok(done(text))
        }
    }
}

/// Runs `list --watch` or `status --watch`, passing each piece of output to `emit` until it
/// returns `false` (its reader is gone) or the watch breaks. Any other command runs once,
/// as [`run`] runs it.
pub async fn watch_command(
    cli: Cli,
    mut emit: impl FnMut(&str) -> bool,
) -> Result<bool, PluginError> {
    if !cli.watches() {
        let report = run(cli).await?;
        emit(&report.text);
        return Ok(report.success);
    }
    let client = connect::client(&cli).await?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let (scope, shape, consul) = match &cli.command {
        Command::Status {
            election,
            all_namespaces,
            ..
        } => (
            status_scope(election.as_deref(), *all_namespaces, &namespace),
            watch::Shape::Status,
            // Like `status`: Consul's view when its settings are valid.
            consul_holder::client_from_env(cli.request_timeout)
                .ok()
                .flatten(),
        ),
        Command::List { all_namespaces, .. } => (
            list_scope(*all_namespaces, &namespace),
            watch::Shape::List {
                all_namespaces: *all_namespaces,
            },
            None,
        ),
        // `watches()` holds only for the two above.
        _ => return Ok(false),
    };
    watch::watch(client, scope, consul.as_ref(), cli.output, shape, emit).await?;
    Ok(true)
}

/// The elections `status` shows: one, the namespace's, or every namespace's.
fn status_scope<'a>(
    election: Option<&'a str>,
    all_namespaces: bool,
    namespace: &'a str,
) -> status::Scope<'a> {
    match (election, all_namespaces) {
        (_, true) => status::Scope::AllNamespaces,
        (Some(name), false) => status::Scope::One { namespace, name },
        (None, false) => status::Scope::Namespace(namespace),
    }
}

/// The elections `list` shows: the namespace's or every namespace's.
fn list_scope(all_namespaces: bool, namespace: &str) -> status::Scope<'_> {
    if all_namespaces {
        status::Scope::AllNamespaces
    } else {
        status::Scope::Namespace(namespace)
    }
}

/// What a command that changes `election` says: `text`, or with `-o name` the election's
/// name.
fn said_or_named(format: OutputFormat, text: String, election: String) -> String {
    match format {
        OutputFormat::Name => output::names([election]),
        _ => text,
    }
}

/// Sets `spec.paused` of the election (a merge patch of that field alone) and says so.
async fn set_paused(
    client: &Client,
    namespace: &str,
    name: &str,
    paused: bool,
) -> Result<String, PluginError> {
    let api: Api<LeaderElection> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"spec": {"paused": paused}});
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| PluginError::election_call(namespace, name, "patch", e))?;
    Ok(paused_message(namespace, name, paused, patched.spec.mode))
}

/// What `pause` or `resume` (`paused`) did to election `namespace/name` of mode `mode`. In
/// Observe mode the applications elect themselves: a pause moves nothing the operator would
/// have moved, and only holds back an edit that must withdraw first.
fn paused_message(namespace: &str, name: &str, paused: bool, mode: Mode) -> String {
    match (paused, mode) {
        (true, Mode::Managed) => format!(
            "{namespace}/{name} paused: nothing moves until `kubectl elector resume {name}`\n"
        ),
        (true, Mode::Observe) => format!(
            "{namespace}/{name} paused, which has no effect on who leads: it is an Observe \
             election, the applications elect themselves and the leader label follows the key's \
             holder (only an edit of its labels, key or Consul access waits for `kubectl elector \
             resume {name}`)\n"
        ),
        (false, _) => format!("{namespace}/{name} resumed\n"),
    }
}

async fn get_election(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<LeaderElection, PluginError> {
    let api: Api<LeaderElection> = Api::namespaced(client.clone(), namespace);
    api.get(name)
        .await
        .map_err(|e| PluginError::election_call(namespace, name, "get", e))
}

#[cfg(test)]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pausing_an_observe_election_says_it_changes_nothing_of_who_leads() {
        let managed = paused_message("shop", "web", true, Mode::Managed);
        assert!(managed.contains("nothing moves until"), "{managed}");
        let observe = paused_message("shop", "db", true, Mode::Observe);
        assert!(observe.contains("no effect on who leads"), "{observe}");
        assert!(!observe.contains("nothing moves"), "{observe}");
        assert_eq!(
            paused_message("shop", "db", false, Mode::Observe),
            "shop/db resumed\n"
        );
    }
}
