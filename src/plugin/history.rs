//! `kubectl elector history`: the election's last leaderships as its status keeps them
//! (`status.history`), like `patronictl history`; with `--events`, its recent events (core/v1
//! Events about this very object: kind, name and UID), oldest first.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::error::PluginError;
use super::output::{Table, age, or_dash};
use crate::crd::{LeaderElection, LeadershipRecord};

/// The leaderships `election`'s status keeps, oldest first.
pub fn leaderships(election: &LeaderElection) -> &[LeadershipRecord] {
    election
        .status
        .as_ref()
        .map_or(&[], |s| s.history.as_slice())
}

/// The table of `leaderships`, times counted from `now`: since when each pod led, for how long
/// (`leading` while it does), with which token, and why it stopped.
pub fn render_leaderships(leaderships: &[LeadershipRecord], now: Timestamp) -> String {
    if leaderships.is_empty() {
        return "No leadership recorded yet.\n".to_owned();
    }
    let mut table = Table::new(&["SINCE", "FOR", "POD", "TOKEN", "ENDED"]);
    for l in leaderships {
        let led = match l.until {
            Some(until) => age(until, l.since),
            None => format!("{} (leading)", age(now, l.since)),
        };
        table.row(vec![
            format!("{} ago", age(now, l.since)),
            led,
            l.pod.clone(),
            or_dash(l.fencing_token),
            or_dash(l.ended.as_deref()),
        ]);
    }
    table.render()
}

/// One event as `history` shows it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When it last happened.
    pub time: Option<Timestamp>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `LeaderElected`, `SwitchoverCompleted`, ...
    pub reason: String,
    /// How often it happened (a series counts every repetition).
    pub count: u32,
    /// What happened.
    pub message: String,
}

impl HistoryEntry {
    /// The entry of a core/v1 Event: the latest of its times, and its count or series count.
    pub fn new(event: &Event) -> Self {
        let series = event.series.as_ref();
        let time = series
            .and_then(|s| s.last_observed_time.as_ref())
            .map(|t| t.0)
            .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.event_time.as_ref().map(|t| t.0))
            .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let count = series
            .and_then(|s| s.count)
            .or(event.count)
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(1)
            .max(1);
        Self {
            time,
            type_: event.type_.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            count,
            message: event.message.clone().unwrap_or_default(),
        }
    }
}

/// The entries of `events`, oldest first (events without a time first, in their order).
pub fn entries(events: &[Event]) -> Vec<HistoryEntry> {
    let mut entries: Vec<HistoryEntry> = events.iter().map(HistoryEntry::new).collect();
    entries.sort_by_key(|e| e.time);
    entries
}

/// The table output, ages counted from `now`.
pub fn render(entries: &[HistoryEntry], now: Timestamp) -> String {
    if entries.is_empty() {
        return "No events found (events expire, by default after an hour).\n".to_owned();
    }
    let mut table = Table::new(&["LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE"]);
    for e in entries {
        table.row(vec![
            or_dash(e.time.map(|t| age(now, t))),
            e.type_.clone(),
            e.reason.clone(),
            e.count.to_string(),
            e.message.clone(),
        ]);
    }
    table.render()
}

/// The events about `election` (matched by kind, name and UID, so an earlier election of the
/// same name does not mix in).
pub async fn events(client: Client, election: &LeaderElection) -> Result<Vec<Event>, PluginError> {
    let namespace = election.namespace().unwrap_or_default();
    let name = election.name_any();
    let mut fields = format!("involvedObject.kind=LeaderElection,involvedObject.name={name}");
    if let Some(uid) = election.uid() {
        fields.push_str(&format!(",involvedObject.uid={uid}"));
    }
    let api: Api<Event> = Api::namespaced(client, &namespace);
    api.list(&ListParams::default().fields(&fields))
        .await
        .map(|list| list.items)
        .map_err(|source| PluginError::Kube {
            operation: format!("list the events of LeaderElection {namespace}/{name}"),
            source,
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: serde_json::Value) -> Event {
        serde_json::from_value(value).expect("a valid Event")
    }

    #[test]
    fn leaderships_show_since_how_long_with_which_token_and_why_they_ended() {
        let at = |t: &str| t.parse::<Timestamp>().expect("timestamp");
        let leaderships = [
            LeadershipRecord {
                pod: "web-0".into(),
                uid: "u0".into(),
                since: at("2024-05-01T08:00:00Z"),
                until: Some(at("2024-05-01T09:30:00Z")),
                fencing_token: Some(5),
                ended: Some("NotReady".into()),
            },
            LeadershipRecord {
                pod: "web-1".into(),
                uid: "u1".into(),
                since: at("2024-05-01T09:30:00Z"),
                until: None,
                fencing_token: Some(6),
                ended: None,
            },
        ];
        let now = at("2024-05-01T10:00:00Z");
        assert_eq!(
            render_leaderships(&leaderships, now),
            "SINCE     FOR            POD    TOKEN  ENDED\n\
             2h0m ago  1h30m          web-0  5      NotReady\n\
             30m ago   30m (leading)  web-1  6      -\n"
        );
        assert!(render_leaderships(&[], now).starts_with("No leadership"));
    }

    #[test]
    fn events_are_sorted_by_their_latest_time_and_counted() {
        let events = [
            event(json!({
                "metadata": {"name": "b"}, "involvedObject": {"kind": "LeaderElection"},
                "eventTime": "2024-05-01T09:58:00.000000Z", "reason": "SwitchoverCompleted",
                "type": "Normal", "message": "web-0 -> web-1",
                "series": {"count": 3, "lastObservedTime": "2024-05-01T09:59:30.000000Z"},
            })),
            event(json!({
                "metadata": {"name": "a"}, "involvedObject": {"kind": "LeaderElection"},
                "lastTimestamp": "2024-05-01T09:50:00Z", "count": 1, "reason": "LeaderElected",
                "type": "Normal", "message": "web-0 leads",
            })),
        ];
        let entries = entries(&events);
        assert_eq!(entries[0].reason, "LeaderElected");
        assert_eq!(entries[1].count, 3);
        let now = "2024-05-01T10:00:00Z".parse().expect("timestamp");
        assert_eq!(
            render(&entries, now),
            "LAST SEEN  TYPE    REASON               COUNT  MESSAGE\n\
             10m        Normal  LeaderElected        1      web-0 leads\n\
             30s        Normal  SwitchoverCompleted  3      web-0 -> web-1\n"
        );
        assert!(render(&[], now).starts_with("No events found"));
    }
}
