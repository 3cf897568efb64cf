//! The floor of a cold start: the least a client built on the operator's crates (kube,
//! hyper, rustls, reqwest, tokio) does for each election, so that the operator's CPU per
//! election can be read against it on the same machine.
//!
//! For each LeaderElection it sees, it sends the operator's requests of a cold start and
//! nothing else, and decides nothing:
//!
//! * the API server: the finalizer (a merge patch of the election), the follower label of
//!   each other candidate, the leader label and fencing-token annotation of the first
//!   candidate by name, and the status (phase, leader, token, transitions): five writes for
//!   three candidates, as the operator's;
//! * Consul: a session, the lock acquired with it, the key read back for its lock index;
//!   every session renewed once per half TTL while it runs.
//!
//! It watches the pods' and the elections' metadata only (no spec, no status), reads no
//! answer of the API server beyond its status code, and takes as candidates the pods
//! labelled `app=<election>`, as the benchmark driver's population is. It stands in for the
//! operator in the driver:
//!
//! ```text
//! SANDBOX_OPERATOR_WRAPPER=target/release/floor-client \
//!     target/release/bench converge --elections 1000
//! ```
//!
//! The driver starts it as `floor-client <operator> run [--watch-namespaces a,b]
//! --metrics-addr ADDR` with `KUBECONFIG` and `CONSUL_HTTP_ADDR` set; it ignores the
//! arguments up to `run` and the metrics address (it serves nothing), and runs until killed.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// Elections worked on at once: the operator's default `--concurrency`.
const CONCURRENCY: usize = 16;
/// The population's session TTL, and half of it, the renewal period.
const SESSION_TTL: &str = "15s";
const RENEW_EVERY: Duration = Duration::from_millis(7_500);
/// The operator's labels and annotation.
const ROLE_LABEL: &str = "elector.dev/role";
const TOKEN_ANNOTATION: &str = "elector.dev/fencing-token";
const FINALIZER: &str = "elector.dev/cleanup";

/// `(namespace, app label) -> pod name -> uid`.
type Candidates = HashMap<(String, String), BTreeMap<String, String>>;

type Failure = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("floor-client: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Failure> {
    let scopes = scopes(std::env::args().skip(1));
    let consul = std::env::var("CONSUL_HTTP_ADDR").map_err(|e| format!("CONSUL_HTTP_ADDR: {e}"))?;
    let consul = if consul.starts_with("http") {
        consul
    } else {
        format!("http://{consul}")
    };
    let client = Client::try_default().await?;
    let http = reqwest::Client::new();

    let candidates = Arc::new(Mutex::new(Candidates::new()));
    let (listed_tx, mut listed) = tokio::sync::watch::channel(0usize);
    for scope in &scopes {
        let api = match scope {
            Some(ns) => Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let candidates = candidates.clone();
        let listed_tx = listed_tx.clone();
        tokio::spawn(
            watch(api, watcher::Config::default())
                .default_backoff()
                .for_each(move |event| {
                    if let Ok(event) = event {
                        file_pod(&candidates, &listed_tx, event);
                    }
                    async {}
                }),
        );
    }
    listed.wait_for(|n| *n >= scopes.len()).await?;

    let resource = election_resource();
    let (queue, elections) = futures::channel::mpsc::unbounded::<(String, String)>();
    for scope in &scopes {
        let api: Api<PartialObjectMeta<DynamicObject>> = match scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let queue = queue.clone();
        tokio::spawn(
            watch(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .try_for_each(move |election| {
                    // Only the first sighting of each election: its later events are this
                    // client's own writes.
                    if election.finalizers().is_empty() {
                        let ns = election.namespace().unwrap_or_default();
                        // The receiver lives as long as this process's main task.
                        let _ = queue.unbounded_send((ns, election.name_any()));
                    }
                    async { Ok(()) }
                }),
        );
    }

    let sessions = Arc::new(Mutex::new(Vec::<String>::new()));
    tokio::spawn(renew(http.clone(), consul.clone(), sessions.clone()));
    let ctx = Floor {
        client,
        http,
        consul,
        candidates,
        sessions,
    };
    elections
        .for_each_concurrent(CONCURRENCY, |(ns, name)| {
            let ctx = &ctx;
            async move {
                if let Err(error) = ctx.elect(&ns, &name).await {
                    eprintln!("floor-client: {ns}/{name}: {error}");
                }
            }
        })
        .await;
    Ok(())
}

/// The namespaces of `--watch-namespaces` after the `run` argument, each `Some`; one `None`
/// (every namespace) without it.
fn scopes(args: impl Iterator<Item = String>) -> Vec<Option<String>> {
    let args: Vec<String> = args.skip_while(|arg| arg != "run").collect();
    let listed = args
        .windows(2)
        .find(|pair| pair[0] == "--watch-namespaces")
        .map(|pair| pair[1].split(',').map(|ns| Some(ns.to_owned())).collect());
    listed.unwrap_or_else(|| vec![None])
}

/// Files one pod event into `candidates`; counts a finished list in `listed`.
fn file_pod(
    candidates: &Mutex<Candidates>,
    listed: &tokio::sync::watch::Sender<usize>,
    event: Event<PartialObjectMeta<Pod>>,
) {
    let (pod, present) = match event {
        Event::Apply(pod) | Event::InitApply(pod) => (pod, true),
        Event::Delete(pod) => (pod, false),
        Event::Init => return,
        Event::InitDone => {
            listed.send_modify(|n| *n += 1);
            return;
        }
    };
    let Some(app) = pod.labels().get("app").cloned() else {
        return;
    };
    let mut candidates = candidates.lock().unwrap_or_else(PoisonError::into_inner);
    let pods = candidates
        .entry((pod.namespace().unwrap_or_default(), app))
        .or_default();
    if present {
        pods.insert(pod.name_any(), pod.uid().unwrap_or_default());
    } else {
        pods.remove(&pod.name_any());
    }
}

/// Renews every session made so far once per [`RENEW_EVERY`], one after the other.
async fn renew(http: reqwest::Client, consul: String, sessions: Arc<Mutex<Vec<String>>>) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    loop {
        tick.tick().await;
        let ids = sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for id in ids {
            let url = format!("{consul}/v1/session/renew/{id}");
            if let Err(error) = http.put(url).send().await {
                eprintln!("floor-client: renewing {id}: {error}");
            }
        }
    }
}

/// The LeaderElection resource, read as metadata and patched by path.
fn election_resource() -> ApiResource {
    let kind = GroupVersionKind::gvk("elector.dev", "v1alpha1", "LeaderElection");
    ApiResource::from_gvk_with_plural(&kind, "leaderelections")
}

/// What every election's work shares.
struct Floor {
    client: Client,
    http: reqwest::Client,
    consul: String,
    candidates: Arc<Mutex<Candidates>>,
    sessions: Arc<Mutex<Vec<String>>>,
}

impl Floor {
    /// The cold start of election `ns/name`: the operator's writes and Consul requests.
    async fn elect(&self, ns: &str, name: &str) -> Result<(), Failure> {
        let election = format!("/apis/elector.dev/v1alpha1/namespaces/{ns}/leaderelections/{name}");
        self.merge_patch(&election, json!({"metadata": {"finalizers": [FINALIZER]}}))
            .await?;

        let created = self
            .consul_body(
                self.http
                    .put(format!("{}/v1/session/create", self.consul))
                    .body(json!({"Name": format!("{ns}/{name}"), "TTL": SESSION_TTL}).to_string()),
            )
            .await?;
        let session = created
            .get("ID")
            .and_then(Value::as_str)
            .ok_or("the session's answer has no ID")?
            .to_owned();
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(session.clone());

        let mut pods = self
            .candidates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or_default();
        let (leader, uid) = pods.pop_first().ok_or("no candidate pods")?;

        let key = format!("{}/v1/kv/floor/{ns}/{name}", self.consul);
        let acquire = self.http.put(format!("{key}?acquire={session}"));
        if self.consul_body(acquire.body(leader.clone())).await? != Value::Bool(true) {
            return Err("the lock was not acquired".into());
        }
        let read = self.consul_body(self.http.get(&key)).await?;
        let token = read
            .get(0)
            .and_then(|entry| entry.get("LockIndex"))
            .and_then(Value::as_u64)
            .ok_or("the key's answer has no LockIndex")?;

        let pod = |pod: &str| format!("/api/v1/namespaces/{ns}/pods/{pod}");
        for follower in pods.keys() {
            let labels = json!({"metadata": {"labels": {ROLE_LABEL: "follower"}}});
            self.merge_patch(&pod(follower), labels).await?;
        }
        let leader_patch = json!({"metadata": {
            "labels": {ROLE_LABEL: "leader"},
            "annotations": {TOKEN_ANNOTATION: token.to_string()},
        }});
        self.merge_patch(&pod(&leader), leader_patch).await?;
        let since = jiff::Timestamp::now().to_string();
        let status = json!({"status": {
            "phase": "Elected",
            "leader": {"pod": leader, "uid": uid, "since": since, "sessionID": session},
            "fencingToken": token,
            "transitions": 1,
        }});
        self.merge_patch(&format!("{election}/status"), status)
            .await
    }

    /// A merge patch of `path`, its answer read as text and not parsed.
    async fn merge_patch(&self, path: &str, patch: Value) -> Result<(), Failure> {
        let request = http::Request::patch(path)
            .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
            .body(patch.to_string().into_bytes())?;
        self.client
            .request_text(request)
            .await
            .map(drop)
            .map_err(|error| format!("PATCH {path}: {error}").into())
    }

    /// Sends a Consul request and parses its JSON answer.
    async fn consul_body(&self, request: reqwest::RequestBuilder) -> Result<Value, Failure> {
        let answer = request.send().await?.error_for_status()?.bytes().await?;
        Ok(serde_json::from_slice(&answer)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn the_namespaces_are_read_after_run() {
        assert_eq!(
            scopes(args(
                "/x/consul-elector run --watch-namespaces a,b --metrics-addr 1"
            )),
            vec![Some("a".to_owned()), Some("b".to_owned())]
        );
        assert_eq!(
            scopes(args("--watch-namespaces z run --metrics-addr 1")),
            vec![None]
        );
    }
}
