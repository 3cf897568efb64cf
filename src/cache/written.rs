//! What this process remembers between reconciles, beside the caches: its own writes that the
//! caches may not show yet (statuses, patched pods), and per
//! election its machine ([`Election`], which holds what its decisions carry from one reconcile
//! to the next).
//!
//! Only reconciles of the active replica write here, each for its own election (the
//! controller never runs two reconciles of one election at once). One map holds everything of
//! an election, so an election costs one entry, and an entry with nothing left in it goes.
//!
//! The locks are held for one map operation at a time, with no code inside that could panic;
//! should a panic ever poison one, the map is still consistent (every change is a single
//! insert, update or removal), so it is used as it is rather than skipped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::Instant;

use crate::cache::keys::election_key;
use crate::crd::{LeaderElection, LeaderElectionStatus};
use crate::election::config::ElectionKey;
use crate::election::machine::Election;
use crate::k8s::{Pod, resource_version};

/// A status this process wrote: the object's UID, the status, and the object's
/// resourceVersion the write produced (once the cache holds that version, it holds the status).
#[derive(Debug, Clone)]
struct WrittenStatus {
    uid: String,
    status: LeaderElectionStatus,
    version: Option<u64>,
}

/// A pod as this process last patched it, and the election whose plan/act loop wrote it
/// (`None`: a write that no further plan of its election took into account, such as a
/// cleanup's).
#[derive(Debug)]
struct WrittenPod {
    pod: Arc<Pod>,
    by: Option<String>,
}

/// Everything remembered of one election.
#[derive(Debug, Default)]
struct Memo {
    /// The status this process last wrote, until the cache shows it. Boxed: the map keeps
    /// its capacity after a cold start's burst of writes, and a memo without a status then
    /// costs a pointer rather than a whole status.
    status: Option<Box<WrittenStatus>>,
    /// The election's machine, between reconciles (a reconcile [`Memory::hold`]s it).
    election: Election,
}

impl Memo {
    fn is_empty(&self) -> bool {
        self.status.is_none() && self.election.is_empty()
    }
}

/// An election's machine held by its reconcile ([`Memory::hold`]).
#[derive(Debug)]
pub struct Held<'a> {
    memory: &'a Memory,
    key: ElectionKey,
    election: Election,
}

impl std::ops::Deref for Held<'_> {
    type Target = Election;
    fn deref(&self) -> &Election {
        &self.election
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Election {
        &mut self.election
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut election = std::mem::take(&mut self.election);
        election.end();
        self.memory.memo(&self.key, |memo| memo.election = election);
    }
}

/// Enters `mutex` (see the module documentation on poisoning).
fn enter<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This process's memory of its own writes and decisions.
#[derive(Debug)]
pub struct Memory {
    elections: Mutex<HashMap<ElectionKey, Memo>>,
    /// Pods as this process last patched them, by UID, until the cache has caught up: the
    /// next reconcile often starts (woken by those very patches) before the pod watch has
    /// delivered them, and planning on the older versions would undo the patches (a leader
    /// that looks unlabelled is "re-elected", and rule 6 then raises its token).
    pods_written: Mutex<HashMap<String, WrittenPod>>,
    /// When this replica started deciding (became active): the Fence clock of a key it has
    /// never read runs from here (it cannot know a later confirmation).
    started_at: Mutex<Instant>,
}

impl Memory {
    /// An empty memory of a process that starts deciding `now` (until [`Self::start`]).
    pub fn new(now: Instant) -> Self {
        Memory {
            elections: Mutex::default(),
            pods_written: Mutex::default(),
            started_at: Mutex::new(now),
        }
    }

    /// Reads or changes the memo of `key`, dropping it once empty.
    fn memo<T>(&self, key: &ElectionKey, f: impl FnOnce(&mut Memo) -> T) -> T {
        let mut map = enter(&self.elections);
        match map.get_mut(key) {
            Some(memo) => {
                let result = f(memo);
                if memo.is_empty() {
                    map.remove(key);
                }
                result
            }
            None => {
                let mut memo = Memo::default();
                let result = f(&mut memo);
                if !memo.is_empty() {
                    map.insert(key.clone(), memo);
                }
                result
            }
        }
    }

    /// Reads the memo of `key` (an empty one when nothing is remembered).
    fn read<T>(&self, key: &ElectionKey, f: impl FnOnce(&Memo) -> T) -> T {
        let map = enter(&self.elections);
        match map.get(key) {
            Some(memo) => f(memo),
            None => f(&Memo::default()),
        }
    }

    /// This replica starts deciding now.
    pub fn start(&self, now: Instant) {
        *enter(&self.started_at) = now;
    }

    /// When this replica started deciding (became active).
    pub fn started_at(&self) -> Instant {
        *enter(&self.started_at)
    }

    /// The machine of election `key`, held by one reconcile until the returned guard drops,
    /// which ends the reconcile and keeps the machine for the next one.
    pub fn hold(&self, key: &ElectionKey) -> Held<'_> {
        let election = self.memo(key, |memo| std::mem::take(&mut memo.election));
        Held {
            memory: self,
            key: key.clone(),
            election,
        }
    }

    /// Forgets the machine of election `key` (deleted: nothing decides for it again).
    pub fn forget_election(&self, key: &ElectionKey) {
        self.memo(key, |memo| memo.election = Election::default());
    }

    /// The election's current status: what this process last wrote for this object, else
    /// the newest version of it the cache holds. A reconcile holds the copy `le` taken when it
    /// started; the cache may show this process's write meanwhile and the memory of it is
    /// then dropped ([`Self::prune`]), so `le`'s own status may be older than both.
    pub fn current_status(
        &self,
        le: &LeaderElection,
        elections: &Store<LeaderElection>,
    ) -> LeaderElectionStatus {
        let remembered = election_key(le).ok().and_then(|key| {
            self.read(&key, |memo| {
                memo.status
                    .as_ref()
                    .filter(|written| le.metadata.uid.as_ref() == Some(&written.uid))
                    .map(|written| written.status.clone())
            })
        });
        remembered.unwrap_or_else(|| {
            let status = match newer_in_cache(le, elections) {
                Some(cached) => cached.status.clone(),
                None => le.status.clone(),
            };
            status.unwrap_or_default()
        })
    }

    /// Whether `le` has a status: one this process remembers writing, or one in the newest
    /// version of it the cache holds.
    pub fn status_exists(&self, le: &LeaderElection, elections: &Store<LeaderElection>) -> bool {
        let remembered = election_key(le).is_ok_and(|key| {
            self.read(&key, |memo| {
                memo.status
                    .as_ref()
                    .is_some_and(|written| le.metadata.uid.as_ref() == Some(&written.uid))
            })
        });
        remembered
            || newer_in_cache(le, elections)
                .map_or(le.status.is_some(), |cached| cached.status.is_some())
    }

    /// Records `status` as written by this process, in the object's `version` (the
    /// resourceVersion the write returned); `None` forgets it.
    pub fn remember_status(
        &self,
        le: &LeaderElection,
        status: Option<(LeaderElectionStatus, Option<&str>)>,
    ) {
        let (Ok(key), Some(uid)) = (election_key(le), le.metadata.uid.clone()) else {
            return;
        };
        self.memo(&key, |memo| {
            memo.status = status.map(|(status, version)| {
                Box::new(WrittenStatus {
                    uid,
                    status,
                    version: version.and_then(|v| v.parse::<u64>().ok()),
                })
            });
        });
    }

    /// Records `pod` as this process just wrote it; `by` is the election (of the pod's
    /// namespace) whose plan/act loop wrote it and plans again on the written version.
    pub fn remember_pod(&self, pod: &Arc<Pod>, by: Option<&str>) {
        if let Some(uid) = pod.metadata.uid.clone() {
            let written = WrittenPod {
                pod: pod.clone(),
                by: by.map(str::to_owned),
            };
            enter(&self.pods_written).insert(uid, written);
        }
    }

    /// The election whose own write produced exactly this version of `pod` (same UID, same
    /// resourceVersion), while this process still remembers that write. That election
    /// already planned on this version: its watch event tells it nothing new.
    pub fn written_by(&self, pod: &Pod) -> Option<String> {
        let uid = pod.metadata.uid.as_deref()?;
        let map = enter(&self.pods_written);
        let written = map.get(uid)?;
        let same = version(&written.pod).is_some() && version(&written.pod) == version(pod);
        same.then(|| written.by.clone()).flatten()
    }

    /// The newer of a cached pod and the version this process last wrote of it.
    pub fn freshest(&self, cached: Arc<Pod>) -> Arc<Pod> {
        let Some(uid) = cached.metadata.uid.as_deref() else {
            return cached;
        };
        let mut map = enter(&self.pods_written);
        match map.get(uid) {
            Some(written) if version(&written.pod) > version(&cached) => written.pod.clone(),
            Some(_) => {
                // The cache has caught up.
                map.remove(uid);
                cached
            }
            None => cached,
        }
    }

    /// The names of the pods of `namespace` this process wrote and the cache does not show
    /// yet.
    pub fn written_pods_in(&self, namespace: &str) -> Vec<String> {
        enter(&self.pods_written)
            .values()
            .map(|written| &written.pod)
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    /// Forgets what the caches have caught up with or no longer have: written pods that
    /// `pods` shows (or lost), statuses that `elections` shows (at 10,000 elections they
    /// would otherwise keep a second copy of every status), and everything of an election
    /// `elections` no longer has.
    pub fn prune(&self, pods: &Store<Pod>, elections: &Store<LeaderElection>) {
        enter(&self.pods_written).retain(|uid, written| {
            let written = &written.pod;
            let (Some(namespace), Some(name)) = (
                written.metadata.namespace.as_deref(),
                written.metadata.name.as_deref(),
            ) else {
                return false;
            };
            pods.get(&ObjectRef::new(name).within(namespace))
                .filter(|cached| cached.metadata.uid.as_deref() == Some(uid.as_str()))
                .is_some_and(|cached| version(written) > version(&cached))
        });
        enter(&self.elections).retain(|key, memo| {
            let reference = ObjectRef::new(&key.name).within(&key.namespace);
            let Some(cached) = elections.get(&reference) else {
                return false;
            };
            let cached_version = resource_version(&cached.metadata);
            // A written status is kept until the cache shows the written version (or a
            // later one) of the same object.
            let caught_up = memo.status.as_ref().is_some_and(|written| {
                cached.metadata.uid.as_ref() != Some(&written.uid)
                    || written.version.is_some_and(|v| cached_version >= Some(v))
            });
            if caught_up {
                memo.status = None;
            }
            !memo.is_empty()
        });
    }
}

/// The cache's version of `le` (same UID) when it is newer than `le`. The memory is read
/// first: once it has dropped a write, the cache shows that write or a later version.
fn newer_in_cache(
    le: &LeaderElection,
    elections: &Store<LeaderElection>,
) -> Option<Arc<LeaderElection>> {
    let (name, namespace) = (
        le.metadata.name.as_deref()?,
        le.metadata.namespace.as_deref()?,
    );
    elections
        .get(&ObjectRef::new(name).within(namespace))
        .filter(|cached| cached.metadata.uid == le.metadata.uid)
        .filter(|cached| resource_version(&cached.metadata) > resource_version(&le.metadata))
}

/// A pod's resourceVersion as a number.
fn version(pod: &Pod) -> Option<u64> {
    resource_version(&pod.metadata)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn key(name: &str) -> ElectionKey {
        ElectionKey {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// Election `ns/web` (UID `u`) in `version`, with `token` in its status when given.
    fn web(version: &str, token: Option<u64>) -> LeaderElection {
        let mut le: LeaderElection = serde_json::from_value(serde_json::json!({
            "apiVersion": "elector.dev/v1alpha1", "kind": "LeaderElection",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u",
                         "resourceVersion": version},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        }))
        .expect("an election");
        le.status = token.map(|token| LeaderElectionStatus {
            fencing_token: Some(token),
            ..LeaderElectionStatus::default()
        });
        le
    }

    #[test]
    fn a_reconcile_holding_an_older_copy_sees_its_write_after_the_cache_caught_up() {
        let memory = Memory::new(Instant::now());
        let (elections, mut writer) = kube::runtime::reflector::store::<LeaderElection>();
        let (pods, _) = kube::runtime::reflector::store::<Pod>();
        // The reconcile's copy: version 1, no status yet.
        let held = web("1", None);
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(held.clone()));
        let written = web("2", Some(1)).status.expect("a status");
        memory.remember_status(&held, Some((written.clone(), Some("2"))));
        assert_eq!(memory.current_status(&held, &elections), written);

        // The cache shows the written version, and the memory of the write goes...
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(web("2", Some(1))));
        memory.prune(&pods, &elections);
        assert!(enter(&memory.elections).is_empty());
        // ...yet the copy taken before still reads the status as written, not its own.
        assert_eq!(memory.current_status(&held, &elections), written);
        assert!(memory.status_exists(&held, &elections));

        // Another object under the same name is not this one.
        let other = LeaderElection {
            metadata: ObjectMeta {
                uid: Some("v".into()),
                ..held.metadata.clone()
            },
            ..held.clone()
        };
        assert_eq!(
            memory.current_status(&other, &elections),
            LeaderElectionStatus::default()
        );
        assert!(!memory.status_exists(&other, &elections));
    }

    #[test]
    fn an_election_with_nothing_left_to_remember_costs_no_entry() {
        let memory = Memory::new(Instant::now());
        let wall = jiff::Timestamp::UNIX_EPOCH;
        {
            let mut held = memory.hold(&key("a"));
            held.not_ready_since(vec![("u1".into(), wall)], Instant::now(), wall);
        }
        assert_eq!(enter(&memory.elections).len(), 1);
        {
            let held = memory.hold(&key("a"));
            assert!(
                !held.is_empty(),
                "what the reconcile before saw is handed on"
            );
        }
        {
            let mut held = memory.hold(&key("a"));
            held.not_ready_since(Vec::new(), Instant::now(), wall);
        }
        assert!(enter(&memory.elections).is_empty());
        // Holding creates nothing.
        drop(memory.hold(&key("b")));
        assert!(enter(&memory.elections).is_empty());
        memory
            .hold(&key("c"))
            .not_ready_since(vec![("u1".into(), wall)], Instant::now(), wall);
        memory.forget_election(&key("c"));
        assert!(enter(&memory.elections).is_empty());
    }

    #[test]
    fn a_memo_without_a_status_is_a_fraction_of_one_with_it() {
        let memo = std::mem::size_of::<Memo>();
        let status = std::mem::size_of::<WrittenStatus>();
        assert!(
            memo * 2 < status,
            "memo {memo} bytes, status {status} bytes"
        );
    }

    fn pod(uid: &str, version: &str) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.name = Some("web-1".into());
        pod.metadata.uid = Some(uid.into());
        pod.metadata.resource_version = Some(version.into());
        Arc::new(pod)
    }

    #[test]
    fn a_pod_version_is_written_by_the_election_that_patched_it_and_only_that_version() {
        let memory = Memory::new(Instant::now());
        memory.remember_pod(&pod("u1", "7"), Some("a"));
        assert_eq!(memory.written_by(&pod("u1", "7")).as_deref(), Some("a"));
        // Another version (someone wrote after us), another incarnation, or no version.
        assert_eq!(memory.written_by(&pod("u1", "8")), None);
        assert_eq!(memory.written_by(&pod("u2", "7")), None);
        assert_eq!(memory.written_by(&pod("u1", "")), None);
        // A write no plan took into account names nobody.
        memory.remember_pod(&pod("u1", "9"), None);
        assert_eq!(memory.written_by(&pod("u1", "9")), None);
    }

    #[test]
    fn a_poisoned_lock_is_entered_as_it_is() {
        let origin = Instant::now();
        let memory = Arc::new(Memory::new(origin));
        memory.remember_pod(&pod("u1", "7"), Some("a"));
        memory.hold(&key("a")).not_ready_since(
            vec![("u1".into(), jiff::Timestamp::UNIX_EPOCH)],
            origin,
            jiff::Timestamp::UNIX_EPOCH,
        );
        let poisoner = memory.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.elections.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(memory.elections.is_poisoned());
        assert!(!memory.hold(&key("a")).is_empty());
    }
}
