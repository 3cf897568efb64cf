//! Rotated Consul credentials on a real Consul (`CONSUL_BIN`; skipped visibly without it, a
//! failure with `CI=true`): the operator follows its token file while it holds a lock, with no
//! leader change, and a broken file keeps the working token (TLS rotation is tested against
//! small TLS servers in tests/consul_credentials.rs). Every test ends with the history check of [`Harness::finish`] (never two leader
//! labels) and checks that no label or fencing token changed.

mod harness;
mod pki;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness::{ConsulUnderTest, Elected, Harness, HarnessOptions, OperatorConsul};
use serde_json::json;
use testkit::cluster::with_namespace;
use testkit::real_consul::{AclRules, Options, Shape};

use pki::write_atomically;

/// The session TTL of the tests' elections: the operator renews about twice per TTL, and
/// Consul drops a session that was not renewed for twice its TTL.
const TTL: Duration = Duration::from_secs(10);

fn web() -> serde_json::Value {
    json!({"selector": {"matchLabels": {"app": "web"}}, "session": {"ttl": "10s", "lockDelay": "1s"}})
}

/// A directory for one test's files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("elector-cred-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// For `window` (which covers several renewals), checks every second that the key is still
/// held by the first session and that no pod's label or annotation changed; then that Consul
/// still has the session (it drops one not renewed for twice its TTL).
async fn holds_without_change(h: &Harness, first: &Elected, window: Duration) {
    let before = h.histories();
    let end = Instant::now() + window;
    while Instant::now() < end {
        let reply = h
            .consul("GET", &format!("/v1/kv/{}", h.key("web")), "")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let key = &reply.json()[0];
        assert_eq!(key["Session"], first.session.as_str(), "{key}");
        assert_eq!(key["LockIndex"], first.token, "{key}");
        assert_eq!(h.histories(), before, "a label or annotation changed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let reply = h
        .consul("GET", &format!("/v1/session/info/{}", first.session), "")
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()[0]["ID"],
        first.session.as_str(),
        "{}",
        reply.body
    );
    let status = h.status("web").await;
    assert_eq!(status.fencing_token, Some(first.token));
}

/// The value of the operator's credential reload counter for `credential` and `result`.
fn reloads(h: &Harness, credential: &str, result: &str) -> u64 {
    let series = format!(
        "consul_elector_consul_credential_reloads_total{{credential=\"{credential}\",result=\"{result}\"}} "
    );
    h.operator()
        .metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_keeps_the_lock_without_a_leader_change() {
    let Some(consul) = ConsulUnderTest::real(Shape::Dev, Options {
            acl: true,
            ..Options::default()
        }).await else {
        return;
    };
    let real = consul.real_consul();
    let token_a = real
        .create_token("operator-a", &AclRules::operator())
        .await
        .unwrap();
    let token_b = real
        .create_token("operator-b", &AclRules::operator())
        .await
        .unwrap();
    let token_c = real
        .create_token("operator-c", &AclRules::operator())
        .await
        .unwrap();
    let dir = Dir::new("token");
    let file = dir.0.join("token");
    write_atomically(&file, format!("{token_a}\n"));
    let options = HarnessOptions {
        operator_consul: OperatorConsul {
            env: vec![
                ("CONSUL_HTTP_TOKEN_FILE".into(), file.display().to_string()),
                ("CONSUL_ELECTOR_CREDENTIALS_RELOAD".into(), "1s".into()),
            ],
            ..OperatorConsul::default()
        },
        ..HarnessOptions::default()
    };
    with_namespace("cred-token", |admin, ns| async move {
        let (h, first) = Harness::web_elected_on_with(admin, ns, consul, options, web()).await;
        let real = h.consul.real_consul();

        // Vault agent writes token B, and token A is revoked.
        write_atomically(&file, format!("{token_b}\n"));
        real.destroy_token(&token_a).await.unwrap();
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "reloaded") >= 1);

        // A file that is not a token keeps token B in use.
        write_atomically(&file, b"\xff\xfe\x00garbage");
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "not_utf8") >= 1);

        // Fixed with token C, and B revoked: C is used.
        write_atomically(&file, format!("{token_c}\n"));
        real.destroy_token(&token_b).await.unwrap();
        holds_without_change(&h, &first, TTL * 5 / 2).await;
        assert!(reloads(&h, "token", "reloaded") >= 2);

        let tokens: Vec<u64> = h
            .recorder
            .annotation_history(&first.pod, consul_elector::crd::FENCING_TOKEN_ANNOTATION)
            .into_iter()
            .flatten()
            .map(|t| t.parse().expect("numeric token"))
            .collect();
        assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{tokens:?}");
        h.finish().await;
    })
    .await;
}
