//! Cases 72-75: the Go client's `api.Lock` algorithm (reference §9) run against the target.
//!
//! `GoLock` below re-states that algorithm over raw HTTP so the cases check that a server
//! answers the way that client relies on. Client-side pauses (`DefaultLockRetryTime`,
//! `DefaultMonitorRetryTime`) are taken on the target's clock.

use std::time::Duration;

use testkit::consul::{Endpoint, Fault, FaultAction};

use crate::target::{Needs, Target, num, value_of};

/// `api.LockFlagValue`.
const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;
const LOCK_RETRY: Duration = Duration::from_secs(5);
const MONITOR_RETRY: Duration = Duration::from_secs(2);

#[derive(Debug, PartialEq)]
enum LockError {
    /// `ErrLockConflict`: the key exists and is not a lock key.
    Conflict,
}

#[derive(Debug, PartialEq)]
enum Monitor {
    Lost,
    Kept,
}

struct GoLock<'a> {
    t: &'a Target,
    key: String,
    session: String,
    value: &'static str,
    /// How many `?acquire=` requests were sent.
    acquires: u32,
}

impl<'a> GoLock<'a> {
    fn new(t: &'a Target, key: &str, session: &str) -> Self {
        GoLock {
            t,
            key: key.to_owned(),
            session: session.to_owned(),
            value: "lock-value",
            acquires: 0,
        }
    }

    async fn read(&self, wait_index: u64) -> (Option<serde_json::Value>, u64) {
        let q = if wait_index > 0 {
            format!("?index={wait_index}&wait=15000ms")
        } else {
            String::new()
        };
        let r = self.t.get(&format!("/v1/kv/{}{q}", self.key)).await;
        let index = r.index();
        match r.status {
            404 => (None, index),
            200 => (Some(r.json()[0].clone()), index),
            s => panic!("failed to read lock: status {s}: {}", r.text()),
        }
    }

    /// `Lock(stopCh)` (reference §9.2, step 3).
    async fn lock(&mut self) -> Result<(), LockError> {
        let mut wait_index = 0;
        loop {
            let (entry, index) = self.read(wait_index).await;
            if let Some(e) = &entry {
                if num(e, "Flags") != LOCK_FLAG {
                    return Err(LockError::Conflict);
                }
                match e["Session"].as_str() {
                    Some(s) if s == self.session => return Ok(()),
                    Some(_) => {
                        wait_index = index;
                        continue;
                    }
                    None => {}
                }
            }
            self.acquires += 1;
            let r = self
                .t
                .kv_put(
                    &self.key,
                    &format!("acquire={}&flags={LOCK_FLAG}", self.session),
                    self.value,
                )
                .await;
            assert_eq!(r.status, 200, "failed to acquire lock: {}", r.text());
            if r.text().contains("true") {
                return Ok(());
            }
            let (entry, index) = self.read(0).await;
            if entry.as_ref().is_some_and(|e| e["Session"].is_string()) {
                wait_index = index;
            } else {
                wait_index = 0;
                self.t.elapse(LOCK_RETRY).await;
            }
        }
    }

    /// `monitorLock` until it either declares the lock lost or has read the key again after an
    /// error and still sees its own session.
    async fn monitor(&self, retries: u32) -> Monitor {
        let mut left = retries;
        let mut recovered = false;
        loop {
            let r = self.t.get(&format!("/v1/kv/{}?consistent", self.key)).await;
            match r.status {
                200 => {
                    let e = &r.json()[0];
                    if e["Session"].as_str() != Some(self.session.as_str()) {
                        return Monitor::Lost;
                    }
                    left = retries;
                    if recovered {
                        return Monitor::Kept;
                    }
                }
                404 => return Monitor::Lost,
                500 if left > 0 => {
                    left -= 1;
                    recovered = true;
                    self.t.elapse(MONITOR_RETRY).await;
                }
                _ => return Monitor::Lost,
            }
        }
    }

    /// `Unlock()`: release with the lock flag and the original value, then destroy.
    async fn unlock(&self) {
        self.t
            .kv_put(
                &self.key,
                &format!("release={}&flags={LOCK_FLAG}", self.session),
                self.value,
            )
            .await
            .assert_bool(true);
        self.t
            .put(&format!("/v1/session/destroy/{}", self.session), Vec::new())
            .await
            .assert_bool(true);
    }
}

pub async fn case_72_lock_refuses_a_key_that_is_not_a_lock(t: &Target) {
    let k = t.key("k");
    t.kv_put(&k, "", "plain").await.assert_bool(true);
    let before = t.kv(&k).await.expect("K");
    let s = t.default_session().await;
    let mut lock = GoLock::new(t, &k, &s);
    assert_eq!(lock.lock().await, Err(LockError::Conflict));
    assert_eq!(lock.acquires, 0, "no acquire attempted");
    assert_eq!(t.kv(&k).await.expect("K"), before);
}

pub async fn case_73_lock_retries_through_a_lock_delay(t: &Target) {
    if !t.supports(Needs::VirtualTime) {
        return;
    }
    let k = t.key("k");
    let s1 = t.session(r#"{"LockDelay":"15s"}"#).await;
    let s2 = t.default_session().await;
    t.kv_put(&k, &format!("acquire={s1}&flags={LOCK_FLAG}"), "v")
        .await
        .assert_bool(true);
    t.put(&format!("/v1/session/destroy/{s1}"), Vec::new())
        .await
        .assert_bool(true);
    let start = t.emu().now();
    let mut lock = GoLock::new(t, &k, &s2);
    assert_eq!(lock.lock().await, Ok(()));
    assert_eq!(lock.acquires, 4, "refused at 0s, 5s and 10s, taken at 15s");
    assert_eq!(t.emu().now() - start, Duration::from_secs(15));
    let e = t.kv(&k).await.expect("K");
    assert_eq!(e["Session"], s2.as_str());
    assert_eq!(num(&e, "LockIndex"), 2);
}

pub async fn case_74_monitor_retries(t: &Target) {
    if !t.supports(Needs::Faults) {
        return;
    }
    for (retries, expected) in [(0, Monitor::Lost), (3, Monitor::Kept)] {
        let k = t.key(&format!("k{retries}"));
        let s = t.default_session().await;
        let mut lock = GoLock::new(t, &k, &s);
        assert_eq!(lock.lock().await, Ok(()));
        t.emu().add_fault(Fault {
            endpoint: Endpoint::Kv,
            method: Some(http::Method::GET),
            action: FaultAction::Respond {
                status: 500,
                body: "rpc error making call: EOF".to_owned(),
                retry_after: None,
            },
            times: Some(1),
        });
        assert_eq!(lock.monitor(retries).await, expected, "retries={retries}");
    }
}

pub async fn case_75_unlock_keeps_value_and_flags_and_frees_the_key_at_once(t: &Target) {
    let k = t.key("k");
    let s1 = t.default_session().await;
    let mut lock = GoLock::new(t, &k, &s1);
    assert_eq!(lock.lock().await, Ok(()));
    lock.unlock().await;
    let e = t.kv(&k).await.expect("K");
    assert!(e.get("Session").is_none(), "{e}");
    assert_eq!(value_of(&e), b"lock-value");
    assert_eq!(num(&e, "Flags"), LOCK_FLAG);
    assert_eq!(
        t.info(&s1).await,
        serde_json::json!([]),
        "session destroyed"
    );
    let s2 = t.default_session().await;
    t.kv_put(&k, &format!("acquire={s2}&flags={LOCK_FLAG}"), "x")
        .await
        .assert_bool(true);
}
