//! The `kubectl-elector` binary end to end: run as a user would, with `KUBECONFIG` pointing at
//! the test cluster and `CONSUL_HTTP_ADDR` at the Consul emulator, against an election the
//! operator runs.

use crate::harness;

use std::process::Output;

use consul_elector::crd::PRIORITY_ANNOTATION;
use harness::{Elected, Harness};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use testkit::cluster::{TestCluster, with_namespace};

/// Runs `kubectl-elector args...` in the harness' namespace; with `consul`, Consul is the
/// harness' emulator, else `CONSUL_HTTP_ADDR` is unset.
async fn plugin(h: &Harness, consul: bool, args: &[&str]) -> Output {
    let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-elector"));
    command
        .args(args)
        .args(["-n", &h.ns])
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .env_remove("CONSUL_HTTP_ADDR")
        .env_remove("CONSUL_HTTP_TOKEN")
        .env_remove("CONSUL_HTTP_TOKEN_FILE")
        .env_remove("CONSUL_HTTP_SSL");
    if consul {
        command.env("CONSUL_HTTP_ADDR", h.emu().url());
    }
    command.output().await.expect("run kubectl-elector")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Asserts the command succeeded; its standard output.
fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "kubectl-elector failed ({}): {}{}",
        output.status,
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(output)
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A follower of `elected`'s election: the first pod by name that does not lead.
fn a_follower(h: &Harness, elected: &Elected) -> String {
    h.current()
        .keys()
        .find(|pod| **pod != elected.pod)
        .cloned()
        .expect("a follower")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_why_and_history_describe_the_running_election() {
    with_namespace("plugin-status", |admin, ns| async move {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        let (h, elected) = Harness::web_elected(admin, ns, spec).await;
        let leader = elected.pod.clone();

        let table = succeeded(&plugin(&h, true, &["status", "web"]).await);
        eprintln!("{table}");
        assert!(table.contains("Conditions:\n"), "{table}");
        let list = succeeded(&plugin(&h, false, &["list"]).await);
        let line = list.lines().nth(1).unwrap_or_default().to_owned();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (fields.first(), fields.get(1), fields.get(2)),
            (Some(&"web"), Some(&"Elected"), Some(&leader.as_str())),
            "{list}"
        );
        assert_eq!(fields.last(), Some(&"True"), "Ready: {list}");
        assert!(
            table.contains(&format!("Election:         {}/web\n", h.ns)),
            "{table}"
        );
        assert!(table.contains("Phase:            Elected\n"), "{table}");
        assert!(
            table.contains(&format!("Leader:           {leader} since ")),
            "{table}"
        );
        assert!(
            table.contains(&format!("Fencing token:    {}\n", elected.token)),
            "{table}"
        );
        assert!(
            table.contains(&format!(
                "Consul holder:    {leader} (session {}, lock index {}, key {})",
                elected.session,
                elected.token,
                h.key("web")
            )),
            "{table}"
        );
        assert_eq!(
            table.matches(" yes ").count(),
            3,
            "three eligible candidates: {table}"
        );

        // kubectl's completion of `kubectl elector` runs the shipped kubectl_complete-elector
        // with the words typed after the plugin's name, the last one being completed.
        let complete = |words: Vec<String>| {
            let plugin = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-elector"));
            let path = format!(
                "{}:{}",
                plugin.parent().expect("the plugin's directory").display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/plugin/kubectl_complete-elector"
            );
            let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
            let output = std::process::Command::new("bash")
                .arg(script)
                .args(words)
                .env("PATH", path)
                .env("KUBECONFIG", cluster.kubeconfig_path())
                .output()
                .expect("run kubectl_complete-elector");
            succeeded(&output)
        };
        let ns_words = |rest: &[&str]| {
            ["-n", h.ns.as_str()]
                .iter()
                .chain(rest)
                .map(|w| (*w).to_owned())
                .collect::<Vec<_>>()
        };
        let elections = complete(ns_words(&["status", ""]));
        assert_eq!(elections, format!("web\tled by {leader}\n:4\n"));
        let candidates = complete(ns_words(&["why", "web", ""]));
        assert_eq!(
            candidates
                .lines()
                .filter(|l| l.ends_with("\teligible"))
                .count(),
            3,
            "{candidates}"
        );
        let subcommands = complete(vec!["sw".into()]);
        assert!(subcommands.starts_with("switchover\t"), "{subcommands}");

        let names = succeeded(&plugin(&h, false, &["list", "-o", "name"]).await);
        assert_eq!(names, "leaderelection.elector.dev/web\n");
        let wide = succeeded(&plugin(&h, false, &["list", "-o", "wide"]).await);
        let header: Vec<&str> = wide
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(
            header[header.len() - 3..],
            ["LEADING", "ELIGIBLE", "REASON"],
            "{wide}"
        );
        let row: Vec<&str> = wide
            .lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(row[row.len() - 2..], ["3/3", "LeaderElected"], "{wide}");

        // A Consul that never answers: each read gives up at --request-timeout.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen");
        let address = silent.local_addr().expect("address");
        let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
        let bounded = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-elector"))
            .args([
                "status",
                "web",
                "-n",
                &h.ns,
                "--request-timeout",
                "1s",
                "-o",
                "json",
            ])
            .env("KUBECONFIG", cluster.kubeconfig_path())
            .env("CONSUL_HTTP_ADDR", format!("http://{address}"))
            .env_remove("CONSUL_HTTP_TOKEN")
            .env_remove("CONSUL_HTTP_TOKEN_FILE")
            .output()
            .await
            .expect("run kubectl-elector");
        let bounded = json_of(&succeeded(&bounded));
        assert_eq!(bounded["consul"]["state"], "unreadable", "{bounded}");
        let error = bounded["consul"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("within 1s"), "{bounded}");
        drop(silent);

        let status = json_of(&succeeded(
            &plugin(&h, true, &["status", "web", "-o", "json"]).await,
        ));
        assert_eq!(status["leader"], leader.as_str());
        assert_eq!(status["fencingToken"], elected.token);
        assert_eq!(status["phase"], "Elected");
        assert_eq!(status["candidates"].as_array().map(Vec::len), Some(3));
        assert_eq!(status["consul"]["state"], "held");
        assert_eq!(status["consul"]["pod"], leader.as_str());
        assert_eq!(status["consul"]["session"], elected.session.as_str());
        let listed = json_of(&succeeded(
            &plugin(&h, false, &["status", "-o", "json"]).await,
        ));
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
        assert_eq!(listed[0]["consul"]["state"], "notAsked");
        let yaml = succeeded(&plugin(&h, false, &["status", "web", "-o", "yaml"]).await);
        assert!(yaml.contains(&format!("leader: {leader}\n")), "{yaml}");

        let why = succeeded(&plugin(&h, false, &["why", "web", &leader]).await);
        assert!(
            why.starts_with(&format!("{leader}: {leader} leads since ")),
            "{why}"
        );
        let follower = a_follower(&h, &elected);
        let why = succeeded(&plugin(&h, false, &["why", "web", &follower]).await);
        assert!(
            why.contains(&format!(
                "eligible, priority 0, but {leader} leads (stickiness: a leader keeps \
                 leading while eligible; failback is off)"
            )),
            "{why}"
        );
        // A pod that must never lead is reported as such by status and why.
        let patch = json!({"metadata": {"annotations": {PRIORITY_ANNOTATION: "-1"}}});
        h.pods()
            .patch(&follower, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotate the follower");
        h.wait_status("web", |le| {
            le.status.as_ref().is_some_and(|s| {
                s.candidates
                    .iter()
                    .any(|c| c.pod == follower && c.reason.as_deref() == Some("NeverLeader"))
            })
        })
        .await;
        let status = json_of(&succeeded(
            &plugin(&h, false, &["status", "web", "-o", "json"]).await,
        ));
        let never = status["candidates"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["pod"] == follower.as_str()))
            .cloned()
            .expect("the follower is a candidate");
        assert_eq!(never["eligible"], false);
        assert_eq!(never["priority"], -1);
        let why = succeeded(&plugin(&h, false, &["why", "web", &follower]).await);
        assert!(
            why.contains("not eligible: NeverLeader (its priority -1"),
            "{why}"
        );
        let why = json_of(&succeeded(
            &plugin(&h, false, &["why", "web", "nobody", "-o", "json"]).await,
        ));
        assert_eq!(why["candidate"], false);
        assert_eq!(why["leads"], false);

        let history = succeeded(&plugin(&h, false, &["history", "web", "--events"]).await);
        assert!(history.starts_with("LAST SEEN"), "{history}");
        assert!(history.contains("LeaderElected"), "{history}");
        let events = json_of(&succeeded(
            &plugin(&h, false, &["history", "web", "--events", "-o", "json"]).await,
        ));
        assert!(
            events
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["reason"] == "LeaderElected")),
            "{events}"
        );

        let missing = plugin(&h, false, &["status", "nothing"]).await;
        assert!(!missing.status.success());
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert!(
            stderr.contains(&format!("LeaderElection {}/nothing not found", h.ns)),
            "{stderr}"
        );
        h.finish().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_moves_leadership_to_the_named_pod_and_refuses_an_unknown_one() {
    with_namespace("plugin-switchover", |admin, ns| async move {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        let (mut h, elected) = Harness::web_elected(admin, ns, spec).await;
        let target = a_follower(&h, &elected);

        let output = plugin(
            &h,
            false,
            &["switchover", "web", "--to", &target, "-o", "json"],
        )
        .await;
        let outcome = json_of(&succeeded(&output));
        assert_eq!(outcome["result"], "Completed", "{outcome}");
        assert_eq!(outcome["leader"], target.as_str());
        assert_eq!(outcome["from"], elected.pod.as_str(), "{outcome}");
        let seconds = outcome["elapsedSeconds"].as_f64().expect("elapsed");
        eprintln!("switchover through the plugin took {seconds:.3}s");
        let now = h.wait_elected("web", Some(&elected.pod)).await;
        assert_eq!(now.pod, target);
        assert!(
            now.token > elected.token,
            "a new acquisition, a higher token"
        );
        let annotations = h
            .elections()
            .get("web")
            .await
            .expect("get election")
            .metadata
            .annotations
            .unwrap_or_default();
        assert!(
            !annotations.contains_key(consul_elector::crd::SWITCHOVER_ANNOTATION),
            "the request is gone: {annotations:?}"
        );

        let refused = plugin(&h, false, &["switchover", "web", "--to", "nobody"]).await;
        assert!(!refused.status.success(), "a refusal exits non-zero");
        let text = stdout(&refused);
        assert!(text.contains(": Refused after "), "{text}");
        assert!(
            text.contains(&format!("Leader: {target} (unchanged)")),
            "{text}"
        );
        assert_eq!(
            h.wait_elected("web", None).await.pod,
            target,
            "nothing moved"
        );

        let why = succeeded(&plugin(&h, false, &["why", "web", &elected.pod]).await);
        assert!(why.contains(&format!("but {target} leads")), "{why}");

        // Any other pod: the operator picks one, never the current leader.
        let any = json_of(&succeeded(
            &plugin(&h, false, &["switchover", "web", "-o", "json"]).await,
        ));
        assert_eq!(any["to"], "*");
        assert_eq!(any["result"], "Completed", "{any}");
        let third = h.wait_elected("web", Some(&target)).await;
        assert_eq!(any["leader"], third.pod.as_str());
        let history = succeeded(&plugin(&h, false, &["history", "web", "--events"]).await);
        assert!(history.contains("SwitchoverCompleted"), "{history}");
        assert!(history.contains("SwitchoverRefused"), "{history}");
        // The leaderships the status keeps: each switchover ended one, the last one leads.
        let led = json_of(&succeeded(
            &plugin(&h, false, &["history", "web", "-o", "json"]).await,
        ));
        let led = led.as_array().cloned().unwrap_or_default();
        let told: Vec<_> = led
            .iter()
            .map(|l| (l["pod"].as_str().unwrap_or_default(), l["ended"].as_str()))
            .collect();
        assert_eq!(
            told[told.len().saturating_sub(3)..],
            [
                (elected.pod.as_str(), Some("Switchover")),
                (target.as_str(), Some("Switchover")),
                (third.pod.as_str(), None),
            ],
            "{led:?}"
        );
        let tokens: Vec<_> = led
            .iter()
            .filter_map(|l| l["fencingToken"].as_u64())
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        let table = succeeded(&plugin(&h, false, &["history", "web"]).await);
        assert!(table.starts_with("SINCE"), "{table}");
        assert!(table.contains("(leading)"), "{table}");

        // Pause and resume, with the kubeconfig given as kubectl's flag rather than
        // $KUBECONFIG; an unknown context is refused.
        let cluster = TestCluster::shared().expect("cluster");
        let kubeconfig = cluster.kubeconfig_path().display().to_string();
        let flagged = |args: &[&str]| {
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-elector"));
            command
                .args(args)
                .args(["-n", &h.ns, "--kubeconfig", &kubeconfig])
                .env_remove("KUBECONFIG")
                .env("HOME", "/nonexistent");
            command.output().expect("run kubectl-elector")
        };
        let paused = succeeded(&flagged(&["pause", "web"]));
        assert!(paused.contains("paused"), "{paused}");
        h.wait_status("web", |le| harness::phase(le).as_deref() == Some("Paused"))
            .await;
        let unknown = flagged(&["resume", "web", "--context", "no-such-context"]);
        assert!(!unknown.status.success(), "an unknown context is an error");
        assert_eq!(
            harness::phase(&h.elections().get("web").await.expect("get")).as_deref(),
            Some("Paused")
        );
        succeeded(&flagged(&["resume", "web"]));
        h.wait_status("web", |le| harness::phase(le).as_deref() == Some("Elected"))
            .await;

        // Without an operator nothing decides: the plugin gives up at its timeout, says how to
        // cancel, and leaves the request in place.
        h.stop_operator().await;
        let waited = plugin(&h, false, &["switchover", "web", "--timeout", "1s"]).await;
        assert!(!waited.status.success());
        let stderr = String::from_utf8_lossy(&waited.stderr);
        assert!(stderr.contains("did not decide the switchover"), "{stderr}");
        assert!(stderr.contains("elector.dev/switchover-to-"), "{stderr}");
        let le = h.elections().get("web").await.expect("get election");
        assert_eq!(
            le.annotations()
                .get(consul_elector::crd::SWITCHOVER_ANNOTATION)
                .map(String::as_str),
            Some("*")
        );
        // The safety rule over the whole history: never two pods labelled leader.
        h.finish().await;
    })
    .await;
}

/// `list --watch` prints the table, then a row each time an election's row changes: here a
/// pause and a resume, seen while the command keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_watch_prints_a_row_for_each_change_until_interrupted() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    with_namespace("plugin-watch", |admin, ns| async move {
        let spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        let (h, elected) = Harness::web_elected(admin, ns, spec).await;
        let cluster = TestCluster::shared().expect("cluster (with_namespace checked)");
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-elector"))
            .args(["list", "--watch", "-n", &h.ns])
            .env("KUBECONFIG", cluster.kubeconfig_path())
            .env_remove("CONSUL_HTTP_ADDR")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run kubectl-elector list --watch");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // The next line within the bound; the command must not have ended.
        let mut next = async || {
            tokio::time::timeout(harness::SOON, lines.next_line())
                .await
                .expect("a line within the bound")
                .expect("read stdout")
                .expect("the watch keeps running")
        };
        let header = next().await;
        assert!(
            header.starts_with("NAME") && header.contains("PHASE"),
            "{header}"
        );
        let row = next().await;
        let fields: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            fields.get(..3),
            Some(&["web", "Elected", elected.pod.as_str()][..]),
            "{row}"
        );

        for (verb, phase) in [("pause", "Paused"), ("resume", "Elected")] {
            succeeded(&plugin(&h, false, &[verb, "web"]).await);
            // Rows until the one showing the new phase (the operator may write the status
            // more than once on the way).
            loop {
                let row = next().await;
                assert!(
                    !row.starts_with("NAME"),
                    "the header is printed once: {row}"
                );
                let fields: Vec<&str> = row.split_whitespace().collect();
                assert_eq!(fields.first(), Some(&"web"), "{row}");
                if fields.get(1) == Some(&phase) {
                    assert_eq!(
                        fields.get(2),
                        Some(&elected.pod.as_str()),
                        "the leader stays: {row}"
                    );
                    break;
                }
            }
        }
        child.kill().await.expect("interrupt the watch");
        h.finish().await;
    })
    .await;
}
