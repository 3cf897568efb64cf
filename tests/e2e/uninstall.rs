//! `helm uninstall` while an election runs: the chart's pre-delete hook asks the operator,
//! still running, to release the election, so it takes its labels off the pods, releases the
//! Consul key, destroys the session and removes its finalizer; the LeaderElection stays. Then
//! the chart is installed again, as the suite installed it, and the kept election elects
//! again with no manual step.
//!
//! Needs what the real-node suite provides (`testkit/scripts/node-e2e.sh`): the release and its
//! values file, and the chart checks' python to run Helm. Elsewhere (`make e2e` after `make
//! demo`) it prints why it does not run: it would uninstall the user's release.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use consul_elector::crd::{LeaderElection, default_key};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;

use kube::ResourceExt;
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::Value;
use testkit::recorder::WatchRecorder;
use tokio::sync::watch;

use crate::election::{SELECTOR, web_elected};
use crate::harness::{self, Env, IGNORE_REASON, operator_marks, wait_for};

/// How long `helm uninstall` (its hook included) and the reinstall may take.
const HELM: Duration = Duration::from_secs(300);

/// What the suite provides to uninstall and reinstall its release.
struct Release {
    name: String,
    values: PathBuf,
    python: PathBuf,
    kubeconfig: PathBuf,
}

impl Release {
    /// The suite's release, or `None` outside the real-node suite.
    fn from_env() -> Option<Self> {
        let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
        Some(Self {
            name: std::env::var("ELECTOR_E2E_RELEASE").ok()?,
            values: var("ELECTOR_E2E_CHART_VALUES")?,
            python: var("ELECTOR_HELM_PYTHON")?,
            kubeconfig: var("KUBECONFIG")?,
        })
    }

    /// Runs `check_chart.py <action>` on the release in the operator's namespace.
    async fn helm(&self, env: &Env, action: &str, extra: &[&std::ffi::OsStr]) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/tests/check_chart.py");
        let mut command = Command::new(&self.python);
        command
            .arg(script)
            .arg(action)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "--namespace",
                &env.operator_namespace,
                "--release",
                &self.name,
            ])
            .args(extra);
        let status = tokio::time::timeout(
            HELM + Duration::from_secs(30),
            tokio::task::spawn_blocking(move || command.status()),
        )
        .await
        .unwrap_or_else(|_| panic!("helm {action} did not finish within {HELM:?}"))
        .expect("the helm thread")
        .unwrap_or_else(|error| panic!("cannot run helm {action}: {error}"));
        assert!(
            status.success(),
            "helm {action} failed ({status}); see above"
        );
    }
}

#[tokio::test]
#[ignore = "needs a kind cluster with the operator installed (make demo); run with ELECTOR_E2E=1"]
async fn uninstalling_the_chart_releases_every_election_and_keeps_it() {
    assert!(IGNORE_REASON.contains("ELECTOR_E2E=1"));
    let Some(env) = harness::env("uninstalling_the_chart").await else {
        return;
    };
    let Some(release) = Release::from_env() else {
        println!(
            "SKIPPED uninstalling_the_chart_releases_every_election_and_keeps_it: it uninstalls \
             and reinstalls the release, which only the real-node suite \
             (testkit/scripts/node-e2e.sh) describes (ELECTOR_E2E_RELEASE, \
             ELECTOR_E2E_CHART_VALUES, ELECTOR_HELM_PYTHON)"
        );
        return;
    };
    let mut ran_to_end = false;
    env.with_namespace("uninstall", |env, ns| {
        let ran_to_end = &mut ran_to_end;
        let release = &release;
        async move {
            let recorder = WatchRecorder::start(env.client.clone(), &ns)
                .await
                .expect("the pod recorder starts");
            let (status, leader) = web_elected(&env, &ns).await;
            let session = status
                .leader
                .and_then(|l| l.session_id)
                .expect("the leader's session in the status");
            let key = default_key(&ns, crate::election::ELECTION);
            println!("{leader} leads with session {session}; uninstalling");

            // Consul lives in the release: it goes with the uninstall. Blocking queries,
            // answered by Consul the moment the key or the session changes, see the release
            // happen before that.
            let (released_tx, released) = watch::channel(false);
            let (destroyed_tx, destroyed) = watch::channel(false);
            let consul = ConsulProxy::new(&env).await;
            let key_watch = tokio::spawn(consul.clone().until(
                format!("/v1/kv/{key}"),
                |entries| {
                    entries
                        .and_then(|e| e.get(0).cloned())
                        .is_none_or(|entry| entry["Session"].is_null())
                },
                released_tx,
            ));
            let session_watch = tokio::spawn(consul.clone().until(
                format!("/v1/session/info/{session}"),
                |sessions| sessions.and_then(Value::as_array).is_none_or(Vec::is_empty),
                destroyed_tx,
            ));

            release.helm(&env, "uninstall", &[]).await;
            key_watch.abort();
            session_watch.abort();
            assert!(*released.borrow(), "Consul released {key} before it went");
            assert!(
                *destroyed.borrow(),
                "Consul destroyed session {session} before it went"
            );

            // The users' object stays, without the finalizer nothing would remove any more.
            let kept = env
                .api::<LeaderElection>(&ns)
                .get_opt(crate::election::ELECTION)
                .await
                .expect("get the LeaderElection")
                .expect("the LeaderElection is kept");
            assert!(
                kept.metadata
                    .finalizers
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty(),
                "no finalizer is left: {:?}",
                kept.metadata.finalizers
            );
            let pods = env.live_pods(&ns, SELECTOR).await;
            assert!(!pods.is_empty(), "the workload stays");
            for pod in &pods {
                assert!(operator_marks(pod).is_empty(), "{pod:?} keeps marks");
            }
            // The hook's objects went with it (hook-succeeded).
            let hooks = env
                .api::<Job>(&env.operator_namespace)
                .list(&ListParams::default().labels("app.kubernetes.io/component=uninstall-hook"))
                .await
                .expect("list Jobs");
            assert!(hooks.items.is_empty(), "the hook Job is deleted: {hooks:?}");

            // The release again, as the suite installed it: the kept election elects again,
            // with no manual step.
            release
                .helm(
                    &env,
                    "install",
                    &["--values".as_ref(), release.values.as_os_str()],
                )
                .await;
            wait_available(&env, release).await;
            let (again, leader) = env
                .elected(
                    &ns,
                    crate::election::ELECTION,
                    SELECTOR,
                    crate::election::REPLICAS,
                )
                .await;
            println!(
                "{} leads again with token {:?}",
                leader.name_any(),
                again.fencing_token
            );
            harness::assert_history(&recorder);
            recorder.stop().await;
            *ran_to_end = true;
        }
    })
    .await;
    assert!(ran_to_end, "the test ran to its end");
}

/// Waits until the release's Deployments (the operator and the chart's dev Consul) are
/// available again.
async fn wait_available(env: &Env, release: &Release) {
    let deployments = env.api::<Deployment>(&env.operator_namespace);
    for name in [release.name.clone(), format!("{}-consul-dev", release.name)] {
        wait_for(
            &format!("Deployment {name} is available again"),
            HELM,
            || {
                let deployments = &deployments;
                let name = &name;
                async move { available(deployments, name).await.then_some(()) }
            },
        )
        .await;
    }
}

/// Whether Deployment `name` has all its replicas updated and available.
async fn available(deployments: &Api<Deployment>, name: &str) -> bool {
    let Ok(Some(deployment)) = deployments.get_opt(name).await else {
        return false;
    };
    let wanted = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
    deployment.status.is_some_and(|s| {
        s.updated_replicas == Some(wanted)
            && s.available_replicas == Some(wanted)
            && s.replicas == Some(wanted)
    })
}

/// Blocking queries to the chart's dev Consul through the API server's service proxy.
#[derive(Clone)]
struct ConsulProxy {
    client: Client,
    base: String,
}

impl ConsulProxy {
    async fn new(env: &Env) -> Self {
        Self {
            client: env.client.clone(),
            base: format!(
                "/api/v1/namespaces/{}/services/{}:http/proxy",
                env.operator_namespace,
                env.consul_service().await
            ),
        }
    }

    /// Follows `path` with blocking queries until `done` holds for its body (`None` for a
    /// 404), then sets `flag`. Ends without setting it when Consul stops answering.
    async fn until(
        self,
        path: String,
        done: impl Fn(Option<&Value>) -> bool,
        flag: watch::Sender<bool>,
    ) {
        let mut index = 0u64;
        loop {
            let separator = if path.contains('?') { '&' } else { '?' };
            let url = format!("{}{path}{separator}index={index}&wait=30s", self.base);
            let Ok(request) = http::Request::get(&url).body(Vec::new()) else {
                return;
            };
            let Ok(response) = self.client.send(request.map(Into::into)).await else {
                return;
            };
            let status = response.status();
            let next = response
                .headers()
                .get("X-Consul-Index")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let Ok(body) = response.into_body().collect().await else {
                return;
            };
            let body = match status.as_u16() {
                200 => serde_json::from_slice::<Value>(&body.to_bytes()).ok(),
                404 => None,
                _ => return,
            };
            if done(body.as_ref()) {
                let _ = flag.send(true);
                return;
            }
            // Consul's index never goes backwards; a reset one restarts the wait.
            index = next.filter(|n| *n >= index).unwrap_or(0);
        }
    }
}
