//! KV operations: Consul's `kvsSetTxn`, `kvsSetCASTxn`, `kvsLockTxn`, `kvsUnlockTxn`,
//! `kvsDeleteTxn`, `kvsDeleteCASTxn`, `kvsDeleteTreeTxn` and the read paths with their
//! index rules.

use std::time::Duration;

use super::super::error::ApiError;
use super::{KvEntry, State};

/// The part of a write request that becomes the new entry.
struct Write {
    key: String,
    value: Vec<u8>,
    flags: u64,
    lock_index: u64,
    session: Option<String>,
}

impl State {
    /// Stores an entry, keeping the session → keys index in sync.
    pub(super) fn store_entry(&mut self, entry: KvEntry) {
        if let Some(old) = self.kvs.get(&entry.key)
            && old.session != entry.session
        {
            let key = entry.key.clone();
            self.unindex_holder(&key);
        }
        if let Some(s) = &entry.session {
            self.held
                .entry(s.to_lowercase())
                .or_default()
                .insert(entry.key.clone());
        }
        self.changed_keys.push(entry.key.clone());
        self.kvs.insert(entry.key.clone(), entry);
    }

    fn unindex_holder(&mut self, key: &str) {
        let Some(holder) = self.kvs.get(key).and_then(|e| e.session.clone()) else {
            return;
        };
        let holder = holder.to_lowercase();
        if let Some(keys) = self.held.get_mut(&holder) {
            keys.remove(key);
            if keys.is_empty() {
                self.held.remove(&holder);
            }
        }
    }

    /// `kvsSetTxn`: CreateIndex kept from an existing entry, the existing Session kept
    /// unless `update_session`, and nothing written when the result is identical.
    fn set_txn(&mut self, idx: u64, w: Write, update_session: bool) {
        let existing = self.kvs.get(&w.key);
        let session = if update_session {
            w.session
        } else {
            existing.and_then(|e| e.session.clone())
        };
        if let Some(e) = existing
            && e.lock_index == w.lock_index
            && e.flags == w.flags
            && e.value == w.value
            && e.session == session
        {
            return;
        }
        let entry = KvEntry {
            create_index: existing.map_or(idx, |e| e.create_index),
            lock_index: w.lock_index,
            key: w.key,
            flags: w.flags,
            value: w.value,
            session,
            modify_index: idx,
        };
        self.store_entry(entry);
        self.index.kvs = idx;
    }

    /// `kvsDeleteTxn`: a tombstone and both table indexes at `idx` when the key existed.
    pub(super) fn delete_txn(&mut self, idx: u64, key: &str) {
        if !self.kvs.contains_key(key) {
            return;
        }
        self.unindex_holder(key);
        self.kvs.remove(key);
        self.changed_keys.push(key.to_string());
        self.tombstones.insert(key.to_string(), idx);
        self.index.kvs = idx;
        self.index.tombstones = idx;
    }

    /// Plain PUT: always `true`. Keeps the Session, resets LockIndex to 0.
    pub(crate) fn kv_set(&mut self, key: &str, value: Vec<u8>, flags: u64) -> bool {
        let idx = self.next_index();
        self.set_txn(idx, plain(key, value, flags), false);
        true
    }

    /// `?cas=N` PUT: `0` creates only if absent; `N` succeeds only if ModifyIndex == N.
    pub(crate) fn kv_cas(&mut self, key: &str, value: Vec<u8>, flags: u64, cas: u64) -> bool {
        let idx = self.next_index();
        let ok = match self.kvs.get(key) {
            None => cas == 0,
            Some(e) => cas != 0 && e.modify_index == cas,
        };
        if ok {
            self.set_txn(idx, plain(key, value, flags), false);
        }
        ok
    }

    /// `?acquire=<session>`: lock-delay first (`false`, no Raft write), then the FSM's
    /// `missing session` / `invalid session "<id>"` errors, then the lock rules.
    pub(crate) fn kv_acquire(
        &mut self,
        key: &str,
        session: &str,
        value: Vec<u8>,
        flags: u64,
        now: Duration,
    ) -> Result<bool, ApiError> {
        if self.lock_delay_until(key, now).is_some() {
            tracing::debug!(key, "rejecting lock of key due to lock-delay");
            return Ok(false);
        }
        self.lock_delays.remove(key);
        let idx = self.next_index();
        if session.is_empty() {
            return Err(ApiError::internal("missing session"));
        }
        if self.session(session).is_none() {
            return Err(ApiError::internal(format!(
                "invalid session {}",
                super::super::query::go_quote(session)
            )));
        }
        let lock_index = match self.kvs.get(key) {
            None => 1,
            Some(e) => match e.session.as_deref() {
                Some(holder) if holder == session => e.lock_index,
                Some(_) => return Ok(false),
                None => e.lock_index + 1,
            },
        };
        let w = Write {
            key: key.to_string(),
            value,
            flags,
            lock_index,
            session: Some(session.to_string()),
        };
        self.set_txn(idx, w, true);
        Ok(true)
    }

    /// `?release=<session>`: `true` only when the given session holds the key; Value and
    /// Flags are replaced from the request, LockIndex kept, no lock-delay.
    pub(crate) fn kv_release(
        &mut self,
        key: &str,
        session: &str,
        value: Vec<u8>,
        flags: u64,
    ) -> Result<bool, ApiError> {
        let idx = self.next_index();
        if session.is_empty() {
            return Err(ApiError::internal("missing session"));
        }
        let Some(e) = self.kvs.get(key) else {
            return Ok(false);
        };
        if e.session.as_deref() != Some(session) {
            return Ok(false);
        }
        let w = Write {
            key: key.to_string(),
            value,
            flags,
            lock_index: e.lock_index,
            session: None,
        };
        self.set_txn(idx, w, true);
        Ok(true)
    }

    /// Plain DELETE: always `true`.
    pub(crate) fn kv_delete(&mut self, key: &str) -> bool {
        let idx = self.next_index();
        self.delete_txn(idx, key);
        true
    }

    /// `DELETE ?cas=N`: deletes when ModifyIndex == N; a missing key is `true` for any N.
    pub(crate) fn kv_delete_cas(&mut self, key: &str, cas: u64) -> bool {
        let idx = self.next_index();
        match self.kvs.get(key) {
            None => true,
            Some(e) if e.modify_index != cas => false,
            Some(_) => {
                self.delete_txn(idx, key);
                true
            }
        }
    }

    /// `DELETE ?recurse`: removes every key with the prefix; one tombstone at the prefix
    /// (none for the empty prefix); indexes move only if something was deleted.
    pub(crate) fn kv_delete_tree(&mut self, prefix: &str) -> bool {
        let idx = self.next_index();
        let keys: Vec<String> = self
            .kvs
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return true;
        }
        for key in &keys {
            self.unindex_holder(key);
            self.kvs.remove(key);
        }
        self.changed_keys.extend(keys);
        if !prefix.is_empty() {
            self.tombstones.insert(prefix.to_string(), idx);
            self.index.tombstones = idx;
        }
        self.index.kvs = idx;
        true
    }

    /// max(kvs, tombstones) table index.
    fn kvs_max_index(&self) -> u64 {
        self.index.kvs.max(self.index.tombstones)
    }

    fn max_tombstone_under(&self, prefix: &str) -> u64 {
        self.tombstones
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, i)| *i)
            .max()
            .unwrap_or(0)
    }

    /// Index rule of list queries: the max of matching entries and tombstones under the
    /// prefix, or the whole-table max for an empty prefix or when both are 0.
    fn list_index(&self, prefix: &str, entries_max: u64) -> u64 {
        let table = self.kvs_max_index();
        if prefix.is_empty() {
            return table;
        }
        let sub = entries_max.max(self.max_tombstone_under(prefix));
        if sub != 0 { sub } else { table }
    }

    fn entries_under(&self, prefix: &str) -> Vec<&KvEntry> {
        self.kvs
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e)
            .collect()
    }

    /// Single-key read: (index, entry). The index is the key's ModifyIndex, or the table
    /// max when it is missing.
    pub(crate) fn kv_get(&self, key: &str) -> (u64, Option<&KvEntry>) {
        match self.kvs.get(key) {
            Some(e) => (e.modify_index, Some(e)),
            None => (self.kvs_max_index(), None),
        }
    }

    /// `?recurse`: (index, entries sorted by key).
    pub(crate) fn kv_list(&self, prefix: &str) -> (u64, Vec<&KvEntry>) {
        let entries = self.entries_under(prefix);
        let max = entries.iter().map(|e| e.modify_index).max().unwrap_or(0);
        (self.list_index(prefix, max), entries)
    }

    /// `?keys[&separator=]`: (index, keys), truncated after the first separator following
    /// the prefix and de-duplicated.
    pub(crate) fn kv_keys(&self, prefix: &str, separator: &str) -> (u64, Vec<String>) {
        let mut keys: Vec<String> = Vec::new();
        let mut max = 0;
        for e in self.entries_under(prefix) {
            max = max.max(e.modify_index);
            let key = if separator.is_empty() {
                e.key.clone()
            } else {
                let after = &e.key[prefix.len()..];
                match after.find(separator) {
                    Some(pos) => e.key[..prefix.len() + pos + separator.len()].to_string(),
                    None => e.key.clone(),
                }
            };
            if keys.last() != Some(&key) {
                keys.push(key);
            }
        }
        (self.list_index(prefix, max), keys)
    }

    /// A stored entry (for the observation API).
    pub(crate) fn kv_entry(&self, key: &str) -> Option<&KvEntry> {
        self.kvs.get(key)
    }
}

fn plain(key: &str, value: Vec<u8>, flags: u64) -> Write {
    Write {
        key: key.to_string(),
        value,
        flags,
        lock_index: 0,
        session: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{create, secs, state};
    use super::*;

    fn get(st: &State, key: &str) -> KvEntry {
        st.kv_get(key).1.cloned().expect("entry")
    }

    #[test]
    fn acquire_decision_table() {
        let mut st = state();
        create(&mut st, "s1", |_| {}, secs(0));
        create(&mut st, "s2", |_| {}, secs(0));
        // Absent → created with LockIndex 1.
        assert_eq!(
            st.kv_acquire("k", "s1", b"v1".to_vec(), 0, secs(0)),
            Ok(true)
        );
        let e = get(&st, "k");
        assert_eq!((e.lock_index, e.session.as_deref()), (1, Some("s1")));
        assert_eq!(e.create_index, e.modify_index);
        // Held by other → false, unchanged, but an index is consumed.
        let raft = st.indexes().raft;
        assert_eq!(
            st.kv_acquire("k", "s2", b"x".to_vec(), 0, secs(0)),
            Ok(false)
        );
        assert_eq!(get(&st, "k"), e);
        assert_eq!(st.indexes().raft, raft + 1);
        assert_eq!(st.indexes().kvs, e.modify_index);
        // Re-acquire by holder → LockIndex unchanged, value replaced.
        assert_eq!(
            st.kv_acquire("k", "s1", b"v2".to_vec(), 0, secs(0)),
            Ok(true)
        );
        let e2 = get(&st, "k");
        assert_eq!((e2.lock_index, e2.value.as_slice()), (1, &b"v2"[..]));
        assert!(e2.modify_index > e.modify_index);
        // Identical re-acquire → no-op write.
        assert_eq!(
            st.kv_acquire("k", "s1", b"v2".to_vec(), 0, secs(0)),
            Ok(true)
        );
        assert_eq!(get(&st, "k").modify_index, e2.modify_index);
        assert_eq!(st.indexes().kvs, e2.modify_index);
        // Flags replaced, then reset when absent.
        assert_eq!(
            st.kv_acquire("k", "s1", b"v2".to_vec(), 42, secs(0)),
            Ok(true)
        );
        assert_eq!(get(&st, "k").flags, 42);
        assert_eq!(
            st.kv_acquire("k", "s1", b"v2".to_vec(), 0, secs(0)),
            Ok(true)
        );
        assert_eq!(get(&st, "k").flags, 0);
        // Unlocked → LockIndex + 1.
        assert_eq!(st.kv_release("k", "s1", b"bye".to_vec(), 0), Ok(true));
        assert_eq!(st.kv_acquire("k", "s2", vec![], 0, secs(0)), Ok(true));
        let e3 = get(&st, "k");
        assert_eq!((e3.lock_index, e3.session.as_deref()), (2, Some("s2")));
        assert_eq!(e3.create_index, e.create_index);
        // Errors.
        let raft = st.indexes().raft;
        assert_eq!(
            st.kv_acquire("k", "", vec![], 0, secs(0)).unwrap_err().body,
            "missing session"
        );
        assert_eq!(
            st.kv_acquire("k", "ghost", vec![], 0, secs(0))
                .unwrap_err()
                .body,
            "invalid session \"ghost\""
        );
        assert_eq!(
            st.indexes().raft,
            raft + 2,
            "failed applies consume indexes"
        );
        assert_eq!(get(&st, "k"), e3);
    }

    #[test]
    fn lock_delay_precedes_session_validation() {
        let mut st = state();
        create(&mut st, "s1", |_| {}, secs(0));
        assert_eq!(
            st.kv_acquire("k", "s1", b"v".to_vec(), 0, secs(0)),
            Ok(true)
        );
        assert!(st.destroy_session("s1", secs(10)));
        let raft = st.indexes().raft;
        assert_eq!(st.kv_acquire("k", "ghost", vec![], 0, secs(11)), Ok(false));
        assert_eq!(st.kv_acquire("k", "", vec![], 0, secs(24)), Ok(false));
        assert_eq!(st.indexes().raft, raft, "lock-delay refusals write nothing");
        // Other writes are unaffected.
        assert!(st.kv_set("k", b"x".to_vec(), 0));
        create(&mut st, "s2", |_| {}, secs(25));
        assert_eq!(st.kv_acquire("k", "s2", vec![], 0, secs(25)), Ok(true));
        assert_eq!(
            get(&st, "k").lock_index,
            1,
            "plain PUT reset LockIndex to 0"
        );
    }

    #[test]
    fn release_rules() {
        let mut st = state();
        create(&mut st, "s1", |_| {}, secs(0));
        assert_eq!(st.kv_release("k", "s1", vec![], 0), Ok(false));
        assert_eq!(
            st.kv_acquire("k", "s1", b"v".to_vec(), 7, secs(0)),
            Ok(true)
        );
        assert_eq!(st.kv_release("k", "s2", vec![], 0), Ok(false));
        assert_eq!(
            st.kv_release("k", "", vec![], 0).unwrap_err().body,
            "missing session"
        );
        assert_eq!(st.kv_release("k", "s1", vec![], 0), Ok(true));
        let e = get(&st, "k");
        assert_eq!(
            (e.session, e.lock_index, e.flags, e.value),
            (None, 1, 0, vec![])
        );
        assert_eq!(st.kv_release("k", "s1", vec![], 0), Ok(false));
        // Explicit release then destroy → no lock-delay.
        assert!(st.destroy_session("s1", secs(1)));
        assert_eq!(st.lock_delay_until("k", secs(1)), None);
    }

    #[test]
    fn plain_put_keeps_session_resets_lock_index() {
        let mut st = state();
        create(&mut st, "s1", |_| {}, secs(0));
        assert_eq!(
            st.kv_acquire("k", "s1", b"v".to_vec(), 0, secs(0)),
            Ok(true)
        );
        assert!(st.kv_set("k", b"z".to_vec(), 0));
        let e = get(&st, "k");
        assert_eq!((e.session.as_deref(), e.lock_index), (Some("s1"), 0));
        // No-op plain PUT: nothing moves except the Raft counter.
        let before = st.indexes();
        assert!(st.kv_set("k", b"z".to_vec(), 0));
        assert_eq!(st.indexes().kvs, before.kvs);
        assert_eq!(st.indexes().raft, before.raft + 1);
    }

    #[test]
    fn cas_rules() {
        let mut st = state();
        assert!(!st.kv_cas("k", b"a".to_vec(), 0, 7));
        assert!(st.kv_cas("k", b"a".to_vec(), 0, 0));
        assert!(!st.kv_cas("k", b"b".to_vec(), 0, 0));
        let m = get(&st, "k").modify_index;
        assert!(!st.kv_cas("k", b"b".to_vec(), 0, m + 100));
        assert!(st.kv_cas("k", b"b".to_vec(), 0, m));
        let m = get(&st, "k").modify_index;
        assert!(st.kv_delete_cas("absent", 0));
        assert!(st.kv_delete_cas("absent", 99));
        assert!(!st.kv_delete_cas("k", 0));
        assert!(!st.kv_delete_cas("k", m + 1));
        assert!(st.kv_delete_cas("k", m));
        assert!(st.kv_get("k").1.is_none());
    }

    #[test]
    fn delete_tombstones_and_read_indexes() {
        let mut st = state();
        assert!(st.kv_set("p/a", b"1".to_vec(), 0));
        assert!(st.kv_set("p/b", b"2".to_vec(), 0));
        assert!(st.kv_set("q", b"3".to_vec(), 0));
        let q_idx = get(&st, "q").modify_index;
        assert_eq!(st.kv_list("p/").0, get(&st, "p/b").modify_index);
        assert_eq!(st.kv_list("").0, q_idx);
        // Delete of a missing key: no index movement in the tables.
        let before = st.indexes();
        assert!(st.kv_delete("missing"));
        assert_eq!(
            (st.indexes().kvs, st.indexes().tombstones),
            (before.kvs, before.tombstones)
        );
        // Recursive delete: one prefix tombstone.
        assert!(st.kv_delete_tree("p/"));
        let del = st.indexes().raft;
        assert_eq!(st.indexes().tombstones, del);
        assert_eq!(st.kv_list("p/"), (del, vec![]));
        assert_eq!(st.kv_get("p/a"), (del, None));
        // A prefix with neither entries nor tombstones → the table max.
        assert_eq!(st.kv_list("zzz").0, del);
        // Empty prefix recurse: no tombstone.
        assert!(st.kv_delete_tree(""));
        assert_eq!(st.indexes().tombstones, del);
        assert_eq!(st.indexes().kvs, st.indexes().raft);
    }

    #[test]
    fn keys_with_separator() {
        let mut st = state();
        for k in ["a/b/c", "a/b/d", "a/d", "b"] {
            assert!(st.kv_set(k, vec![], 0));
        }
        assert_eq!(st.kv_keys("a/", "/").1, vec!["a/b/", "a/d"]);
        assert_eq!(st.kv_keys("", "/").1, vec!["a/", "b"]);
        assert_eq!(st.kv_keys("a/", "").1, vec!["a/b/c", "a/b/d", "a/d"]);
    }
}
