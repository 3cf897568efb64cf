//! The real-Consul harness itself: both shapes start, a member killed and restarted rejoins,
//! a paused leader is replaced, a partition holds requests silent, and ACL tokens work.
//! Skipped (visibly) without `CONSUL_BIN`.

use std::time::{Duration, Instant};

use testkit::real_consul::{AclRules, Options, RealConsul, Shape};

const BOUND: Duration = Duration::from_secs(60);

async fn status(url: &str, token: Option<&str>, method: reqwest::Method, path: &str) -> u16 {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let mut request = client.request(method, format!("{url}{path}")).body("v");
    if let Some(token) = token {
        request = request.header("X-Consul-Token", token);
    }
    request.send().await.map_or(0, |r| r.status().as_u16())
}

async fn wait_leader_other_than(consul: &RealConsul, old: usize) -> usize {
    consul
        .wait_leader_other_than(old, BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_dev_agent_answers_through_its_proxy_and_a_partition_silences_it() {
    let Some(consul) = RealConsul::start(Shape::Dev, Options::default())
        .await
        .expect("start")
    else {
        return;
    };
    let version = consul.version();
    assert!(
        version.at_least(1, 0),
        "the binary reports its version: {version}"
    );
    assert_eq!(
        status(&consul.url(), None, reqwest::Method::PUT, "/v1/kv/smoke").await,
        200
    );
    consul.members()[0].partition();
    let started = Instant::now();
    assert_eq!(
        status(&consul.url(), None, reqwest::Method::GET, "/v1/kv/smoke").await,
        0,
        "a partitioned member does not answer"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "silence, not a refusal"
    );
    consul.members()[0].heal();
    assert_eq!(
        status(&consul.url(), None, reqwest::Method::GET, "/v1/kv/smoke").await,
        200
    );
}

#[tokio::test]
async fn a_three_server_cluster_survives_its_leader_killed_or_paused() {
    let Some(consul) = RealConsul::start(Shape::Cluster, Options::default())
        .await
        .expect("start")
    else {
        return;
    };
    let first = consul.leader().await.expect("a leader");
    consul.members()[first].kill();
    let second = wait_leader_other_than(&consul, first).await;
    assert_eq!(
        status(
            &consul.members()[second].url(),
            None,
            reqwest::Method::PUT,
            "/v1/kv/k"
        )
        .await,
        200
    );
    consul.members()[first].restart().expect("restart");
    consul.wait_ready(BOUND).await.expect("rejoined");
    consul.members()[second].pause();
    let third = wait_leader_other_than(&consul, second).await;
    consul.members()[second].resume();
    assert_eq!(
        status(
            &consul.members()[third].url(),
            None,
            reqwest::Method::GET,
            "/v1/kv/k"
        )
        .await,
        200,
        "the key written before survived both leader changes"
    );
}

#[tokio::test]
async fn acl_tokens_allow_what_their_rules_say() {
    let Some(consul) = RealConsul::start(
        Shape::Dev,
        Options {
            acl: true,
            ..Options::default()
        },
    )
    .await
    .expect("start") else {
        return;
    };
    let operator = consul
        .create_token("operator", &AclRules::operator())
        .await
        .expect("token");
    let url = consul.url();
    let put = reqwest::Method::PUT;
    assert_eq!(
        status(&url, Some(&operator), put.clone(), "/v1/kv/elector/a").await,
        200
    );
    assert_eq!(
        status(&url, Some(&operator), put.clone(), "/v1/kv/other").await,
        403
    );
    assert_eq!(
        status(&url, None, put.clone(), "/v1/kv/elector/a").await,
        403
    );
    consul.destroy_token(&operator).await.expect("destroy");
    assert_eq!(
        status(&url, Some(&operator), put, "/v1/kv/elector/a").await,
        403
    );
}

/// A member that exits at once (as when another process took one of its ports between the
/// harness picking it and Consul binding it) makes the harness start again on other ports.
#[tokio::test]
async fn a_member_exiting_at_start_is_started_again_on_other_ports() {
    let Some(consul) = testkit::real_consul::consul_binary().expect("binary") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("real-consul-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let first = dir.join("first-start-done");
    let script = dir.join("consul");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = agent ] && [ ! -e '{first}' ]; then touch '{first}'; \
             echo 'bind: address already in use'; exit 1; fi\nexec '{consul}' \"$@\"\n",
            first = first.display(),
            consul = consul.display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let started = Instant::now();
    let real = RealConsul::start_with(script, Shape::Dev, Options::default())
        .await
        .expect("started on the second attempt");
    assert!(first.exists(), "the first start did exit");
    assert!(real.version().at_least(1, 0));
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
    drop(real);
    let _ = std::fs::remove_dir_all(&dir);
}
