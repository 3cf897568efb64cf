//! Change notification for blocking queries, per topic: one channel per watched key, one
//! for the KV tables (lists) and one for the sessions table, so a write wakes only the
//! queries it can affect (no thundering herd with thousands of parked watches).

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::mutex::lock;

/// What a blocking query watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Topic {
    /// One KV key (single-key GET): its entry changed, appeared or was deleted.
    Key(String),
    /// The `kvs` or `tombstones` table (recurse/keys listings).
    Kv,
    /// The `sessions` table (session info/list/node).
    Sessions,
}

/// Version counters per topic; receivers wake when their topic's version moves.
#[derive(Debug)]
pub(crate) struct Notifier {
    kv: watch::Sender<u64>,
    sessions: watch::Sender<u64>,
    /// Created on first subscription, removed once nobody watches the key.
    keys: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier {
            kv: watch::Sender::new(0),
            sessions: watch::Sender::new(0),
            keys: Mutex::new(HashMap::new()),
        }
    }
}

fn bump(tx: &watch::Sender<u64>) {
    tx.send_modify(|v| *v = v.wrapping_add(1));
}

impl Notifier {
    /// A receiver for `topic`, marked as having seen the current version.
    pub(crate) fn subscribe(&self, topic: &Topic) -> watch::Receiver<u64> {
        let mut rx = match topic {
            Topic::Kv => self.kv.subscribe(),
            Topic::Sessions => self.sessions.subscribe(),
            Topic::Key(key) => lock(&self.keys)
                .entry(key.clone())
                .or_insert_with(|| watch::Sender::new(0))
                .subscribe(),
        };
        rx.borrow_and_update();
        rx
    }

    /// The current version of `topic` (0 for a key nobody watches).
    pub(crate) fn version(&self, topic: &Topic) -> u64 {
        match topic {
            Topic::Kv => *self.kv.borrow(),
            Topic::Sessions => *self.sessions.borrow(),
            Topic::Key(key) => lock(&self.keys).get(key).map_or(0, |tx| *tx.borrow()),
        }
    }

    /// Drops the channel of a key nobody watches any more.
    pub(crate) fn release(&self, topic: &Topic) {
        if let Topic::Key(key) = topic {
            let mut keys = lock(&self.keys);
            if keys.get(key).is_some_and(|tx| tx.receiver_count() == 0) {
                keys.remove(key);
            }
        }
    }

    /// Wakes the watchers of the KV tables.
    pub(crate) fn kv_changed(&self) {
        bump(&self.kv);
    }

    /// Wakes the watchers of the sessions table.
    pub(crate) fn sessions_changed(&self) {
        bump(&self.sessions);
    }

    /// Wakes the watchers of the given keys.
    pub(crate) fn keys_changed(&self, changed: &[String]) {
        if changed.is_empty() {
            return;
        }
        let keys = lock(&self.keys);
        for key in changed {
            if let Some(tx) = keys.get(key) {
                bump(tx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_channels_come_and_go() {
        let n = Notifier::default();
        let topic = Topic::Key("k".into());
        let rx = n.subscribe(&topic);
        assert_eq!(n.version(&topic), 0);
        n.keys_changed(&["other".into()]);
        assert!(!rx.has_changed().expect("open"));
        n.keys_changed(&["k".into()]);
        assert!(rx.has_changed().expect("open"));
        assert_eq!(n.version(&topic), 1);
        n.release(&topic);
        assert_eq!(n.version(&topic), 1, "still watched");
        drop(rx);
        n.release(&topic);
        assert_eq!(n.version(&topic), 0, "channel removed");
        let kv = n.subscribe(&Topic::Kv);
        n.sessions_changed();
        assert!(!kv.has_changed().expect("open"));
        n.kv_changed();
        assert!(kv.has_changed().expect("open"));
    }
}
