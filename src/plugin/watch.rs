//! `--watch` of `list` and `status`: the first output as without it, then each election whose
//! shown state changed, as `kubectl get --watch` prints them, until interrupted.
//!
//! `list` prints one row per change (no header), `status` the election's block again; JSON
//! prints one object per line and YAML one document per change. A change the output does not
//! show (a renewed timestamp, a new resourceVersion) prints nothing.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

use super::cli::OutputFormat;
use super::consul_holder;
use super::error::PluginError;
use super::output;
use super::status::{self, ElectionStatus, Scope};
use crate::consul::ConsulClient;
use crate::crd::LeaderElection;

/// What a watch prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `list`: rows, with a namespace column when `all_namespaces`.
    List {
        /// Every namespace.
        all_namespaces: bool,
    },
    /// `status`: blocks.
    Status,
}

/// Watches the elections of `scope`, passing each piece of output to `emit` (which returns
/// `false` once its reader is gone: the watch then ends). Ends with an error when the API
/// server refuses the watch or it breaks; like `kubectl get --watch`, it does not retry.
pub async fn watch(
    client: Client,
    scope: Scope<'_>,
    consul: Option<&ConsulClient>,
    format: OutputFormat,
    shape: Shape,
    mut emit: impl FnMut(&str) -> bool,
) -> Result<(), PluginError> {
    let (api, config, what): (Api<LeaderElection>, _, String) = match scope {
        Scope::One { namespace, name } => (
            Api::namespaced(client, namespace),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            format!("LeaderElection {namespace}/{name}"),
        ),
        Scope::Namespace(namespace) => (
            Api::namespaced(client, namespace),
            watcher::Config::default(),
            format!("LeaderElections in {namespace}"),
        ),
        Scope::AllNamespaces => (
            Api::all(client),
            watcher::Config::default(),
            "LeaderElections in all namespaces".to_owned(),
        ),
    };
    let mut events = watcher::watcher(api, config).boxed();
    let mut shown: BTreeMap<(String, String), ElectionStatus> = BTreeMap::new();
    let mut initial: Vec<LeaderElection> = Vec::new();
    loop {
        let event = events
            .try_next()
            .await
            .map_err(|source| PluginError::WatchStream {
                what: what.clone(),
                source,
            })?;
        let Some(event) = event else {
            return Ok(());
        };
        let text = match event {
            Event::Init => {
                initial.clear();
                continue;
            }
            Event::InitApply(election) => {
                initial.push(election);
                continue;
            }
            Event::InitDone => {
                initial.sort_by_key(|le| (le.namespace(), le.name_any()));
                let mut views = Vec::with_capacity(initial.len());
                for election in initial.drain(..) {
                    views.push(view_of(&election, consul).await);
                }
                let first = shown.is_empty();
                let changed: Vec<ElectionStatus> = views
                    .into_iter()
                    .filter(|view| remember(&mut shown, view))
                    .collect();
                if first {
                    everything(format, shape, &changed)?
                } else {
                    // A re-list after a lost watch: only what changed meanwhile.
                    changes(format, shape, &changed)?
                }
            }
            Event::Apply(election) | Event::Delete(election) => {
                let view = view_of(&election, consul).await;
                if !remember(&mut shown, &view) {
                    continue;
                }
                changes(format, shape, std::slice::from_ref(&view))?
            }
        };
        if !text.is_empty() && !emit(&text) {
            return Ok(());
        }
    }
}

/// The election as `status` shows it, with Consul's view when `consul` is given.
async fn view_of(election: &LeaderElection, consul: Option<&ConsulClient>) -> ElectionStatus {
    let holder = consul_holder::read(consul, election).await;
    ElectionStatus::new(election, holder)
}

/// Records `view` as shown; whether it differs from what was shown last for its election.
fn remember(shown: &mut BTreeMap<(String, String), ElectionStatus>, view: &ElectionStatus) -> bool {
    let key = (view.namespace.clone(), view.name.clone());
    if shown.get(&key) == Some(view) {
        return false;
    }
    shown.insert(key, view.clone());
    true
}

/// The first output: what `list` or `status` prints without `--watch`.
fn everything(
    format: OutputFormat,
    shape: Shape,
    views: &[ElectionStatus],
) -> Result<String, PluginError> {
    match (format, shape) {
        (OutputFormat::Table | OutputFormat::Wide, Shape::List { all_namespaces }) => {
            Ok(status::render_list(views, columns(format, all_namespaces)))
        }
        (OutputFormat::Table | OutputFormat::Wide, Shape::Status) => {
            Ok(status::render_all(views, Timestamp::now()))
        }
        _ => changes(format, shape, views),
    }
}

/// The columns of `list` in `format`.
fn columns(format: OutputFormat, all_namespaces: bool) -> status::Columns {
    status::Columns {
        all_namespaces,
        wide: (format == OutputFormat::Wide).then(Timestamp::now),
    }
}

/// The output for elections that changed: rows without the header, blocks, or one JSON
/// object per line / one YAML document each.
fn changes(
    format: OutputFormat,
    shape: Shape,
    views: &[ElectionStatus],
) -> Result<String, PluginError> {
    let mut text = String::new();
    for view in views {
        match (format, shape) {
            (OutputFormat::Table | OutputFormat::Wide, Shape::List { all_namespaces }) => {
                let table = status::render_list(
                    std::slice::from_ref(view),
                    columns(format, all_namespaces),
                );
                // The header is printed once, by the first output.
                text.extend(table.lines().skip(1).map(|line| format!("{line}\n")));
            }
            (OutputFormat::Table | OutputFormat::Wide, Shape::Status) => {
                text.push('\n');
                text.push_str(&view.render(Timestamp::now()));
            }
            (OutputFormat::Name, _) => text.push_str(&output::names([view.name.clone()])),
            (OutputFormat::Json, _) => {
                let line = serde_json::to_string(view).map_err(|e| PluginError::Render {
                    format: "json",
                    detail: e.to_string(),
                })?;
                text.push_str(&line);
                text.push('\n');
            }
            (OutputFormat::Yaml, _) => {
                text.push_str("---\n");
                text.push_str(&output::render(
                    format,
                    view,
                    |_| Vec::new(),
                    |_| String::new(),
                )?);
            }
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::consul_holder::ConsulHolder;
    use crate::plugin::fixtures::{election, led_by_web_1};

    fn view() -> ElectionStatus {
        ElectionStatus::new(
            &election(serde_json::json!({}), led_by_web_1()),
            ConsulHolder::NotAsked {
                reason: "no Consul".into(),
            },
        )
    }

    #[test]
    fn a_change_is_one_row_without_the_header() {
        let view = view();
        let first = everything(
            OutputFormat::Table,
            Shape::List {
                all_namespaces: false,
            },
            std::slice::from_ref(&view),
        )
        .expect("renders");
        assert!(first.starts_with("NAME"), "{first}");
        let change = changes(
            OutputFormat::Table,
            Shape::List {
                all_namespaces: false,
            },
            std::slice::from_ref(&view),
        )
        .expect("renders");
        assert_eq!(change.lines().count(), 1, "{change}");
        assert!(
            change.starts_with("web") && change.contains("web-1"),
            "{change}"
        );
    }

    #[test]
    fn json_is_one_object_per_line_and_yaml_one_document_each() {
        let views = [view(), view()];
        let json = changes(OutputFormat::Json, Shape::Status, &views).expect("renders");
        assert_eq!(json.lines().count(), 2, "{json}");
        for line in json.lines() {
            let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
            assert_eq!(value["leader"], "web-1");
        }
        let yaml = changes(
            OutputFormat::Yaml,
            Shape::List {
                all_namespaces: true,
            },
            &views,
        )
        .expect("renders");
        assert_eq!(yaml.matches("---\n").count(), 2, "{yaml}");
    }

    #[test]
    fn only_a_shown_change_counts() {
        let mut shown = BTreeMap::new();
        let mut view = view();
        assert!(remember(&mut shown, &view), "first sight");
        assert!(!remember(&mut shown, &view), "same again");
        view.transitions += 1;
        assert!(remember(&mut shown, &view), "a shown field changed");
    }
}
