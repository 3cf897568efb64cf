//! `kubectl elector status`: each election's leader, token, candidates, last switchover and
//! Consul holder.

use futures::{StreamExt, stream};
use jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::consul_holder::{self, ConsulHolder};
use super::error::PluginError;
use super::output::{Table, age, or_dash, when};
use crate::consul::ConsulClient;
use crate::crd::{CandidateStatus, LeaderElection, Phase, SwitchoverStatus};

/// Which elections `status` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// One election of a namespace.
    One {
        /// The namespace.
        namespace: &'a str,
        /// The election.
        name: &'a str,
    },
    /// Every election of a namespace.
    Namespace(&'a str),
    /// Every election of the cluster.
    AllNamespaces,
}

/// One election as `status` shows it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElectionStatus {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Where the election stands (`None`: the operator has not looked at it).
    pub phase: Option<Phase>,
    /// The pod that leads.
    pub leader: Option<String>,
    /// While none leads: the pod that led last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_leader: Option<String>,
    /// Fencing token of the current leadership.
    pub fencing_token: Option<u64>,
    /// Since when the leader leads.
    pub since: Option<Timestamp>,
    /// How often leadership moved.
    pub transitions: u64,
    /// Every selected pod, whether it may lead, and its priority.
    pub candidates: Vec<Candidate>,
    /// The last switchover request and its outcome.
    pub last_switchover: Option<SwitchoverStatus>,
    /// The key's holder as Consul sees it.
    pub consul: ConsulHolder,
    /// The status conditions: type, status, reason and message.
    pub conditions: Vec<ConditionLine>,
}

/// A status condition as the output shows it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ConditionLine {
    /// The condition type (`Ready`, `LeaderElected`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Why, in one CamelCase word.
    pub reason: String,
    /// Why, for people.
    pub message: String,
}

/// A candidate as the output shows it: like [`CandidateStatus`], with the priority always
/// present (the status leaves out the default 0).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Pod name.
    pub pod: String,
    /// Whether it may lead now.
    pub eligible: bool,
    /// Why it may not lead.
    pub reason: Option<String>,
    /// Its `elector.dev/priority`.
    pub priority: i32,
}

impl From<&CandidateStatus> for Candidate {
    fn from(c: &CandidateStatus) -> Self {
        Self {
            pod: c.pod.clone(),
            eligible: c.eligible,
            reason: c.reason.clone(),
            priority: c.priority,
        }
    }
}

impl ElectionStatus {
    /// The status of `election` with `consul`'s view of its key.
    pub fn new(election: &LeaderElection, consul: ConsulHolder) -> Self {
        let status = election.status.clone().unwrap_or_default();
        Self {
            namespace: election.namespace().unwrap_or_default(),
            name: election.name_any(),
            phase: status.phase,
            leader: status.leader.as_ref().map(|l| l.pod.clone()),
            last_leader: status.last_leader.as_ref().map(|l| l.pod.clone()),
            fencing_token: status.fencing_token,
            since: status.leader.as_ref().map(|l| l.since),
            transitions: status.transitions,
            candidates: status.candidates.iter().map(Candidate::from).collect(),
            last_switchover: status.last_switchover,
            consul,
            conditions: status
                .conditions
                .iter()
                .map(|c| ConditionLine {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
        }
    }

    /// The text block of the table output, ages counted from `now`.
    pub fn render(&self, now: Timestamp) -> String {
        let leader = match (&self.leader, &self.since, &self.last_leader) {
            (Some(pod), Some(since), _) => format!("{pod} since {}", when(now, *since)),
            (Some(pod), None, _) => pod.clone(),
            (None, _, Some(last)) => format!("none (last leader {last})"),
            (None, _, None) => "none".to_owned(),
        };
        let mut head = Table::default();
        let mut line = |field: &str, value: String| head.row(vec![format!("{field}:"), value]);
        line("Election", format!("{}/{}", self.namespace, self.name));
        line("Phase", or_dash(self.phase.map(|p| format!("{p:?}"))));
        line("Leader", leader);
        line("Fencing token", or_dash(self.fencing_token));
        line("Transitions", self.transitions.to_string());
        line("Consul holder", self.consul.summary());
        line(
            "Last switchover",
            self.last_switchover
                .as_ref()
                .map_or_else(|| "none".to_owned(), |s| switchover_summary(s, now)),
        );
        let mut out = head.render();
        if self.candidates.is_empty() {
            out.push_str("Candidates:       none\n");
        } else {
            out.push_str("Candidates:\n");
            let mut table = Table::new(&["POD", "ELIGIBLE", "PRIORITY", "REASON"]);
            for c in &self.candidates {
                table.row(vec![
                    c.pod.clone(),
                    if c.eligible { "yes" } else { "no" }.to_owned(),
                    c.priority.to_string(),
                    or_dash(c.reason.as_ref()),
                ]);
            }
            out.push_str(&indented(&table));
        }
        if !self.conditions.is_empty() {
            out.push_str("Conditions:\n");
            let mut table = Table::new(&["TYPE", "STATUS", "REASON", "MESSAGE"]);
            for c in &self.conditions {
                table.row(vec![
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ]);
            }
            out.push_str(&indented(&table));
        }
        out
    }
}

/// `table`'s rows, each indented by two spaces.
fn indented(table: &Table) -> String {
    table
        .render()
        .lines()
        .map(|row| format!("  {row}\n"))
        .collect()
}

/// One line about a switchover request: result, target, the move, when, and the operator's
/// message.
pub fn switchover_summary(s: &SwitchoverStatus, now: Timestamp) -> String {
    let moved = match (&s.from, &s.leader) {
        (Some(from), Some(to)) => format!(", {from} -> {to}"),
        (None, Some(to)) => format!(", -> {to}"),
        _ => String::new(),
    };
    let message = if s.message.is_empty() {
        String::new()
    } else {
        format!(": {}", s.message)
    };
    format!(
        "{:?} (to {}{moved}, requested {}){message}",
        s.result,
        s.to,
        when(now, s.requested_at)
    )
}

/// Every status of `views` as text blocks separated by blank lines.
pub fn render_all(views: &[ElectionStatus], now: Timestamp) -> String {
    if views.is_empty() {
        return "No LeaderElections found.\n".to_owned();
    }
    views
        .iter()
        .map(|v| v.render(now))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The elections `views` show, for `-o name`.
pub fn names(views: &[ElectionStatus]) -> Vec<String> {
    views.iter().map(|v| v.name.clone()).collect()
}

/// Which columns `kubectl elector list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// The namespace first (`-A`).
    pub all_namespaces: bool,
    /// `-o wide`, as of this time: also how long the leader leads, how many candidates may
    /// lead, and why the election is (not) Ready.
    pub wide: Option<Timestamp>,
}

/// One line per election (`kubectl elector list`), with the `columns` asked for.
pub fn render_list(views: &[ElectionStatus], columns: Columns) -> String {
    if views.is_empty() {
        return "No LeaderElections found.\n".to_owned();
    }
    let mut header = vec!["NAME", "PHASE", "LEADER", "TOKEN", "TRANSITIONS", "READY"];
    if columns.all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    if columns.wide.is_some() {
        header.extend(["LEADING", "ELIGIBLE", "REASON"]);
    }
    let mut table = Table::new(&header);
    for view in views {
        let ready = view
            .conditions
            .iter()
            .find(|c| c.type_ == crate::crd::conditions::READY);
        let mut row = vec![
            view.name.clone(),
            or_dash(view.phase.map(|p| format!("{p:?}"))),
            or_dash(view.leader.as_ref()),
            or_dash(view.fencing_token),
            view.transitions.to_string(),
            or_dash(ready.map(|c| c.status.clone())),
        ];
        if columns.all_namespaces {
            row.insert(0, view.namespace.clone());
        }
        if let Some(now) = columns.wide {
            let eligible = view.candidates.iter().filter(|c| c.eligible).count();
            row.extend([
                or_dash(
                    view.since
                        .filter(|_| view.leader.is_some())
                        .map(|since| age(now, since)),
                ),
                format!("{eligible}/{}", view.candidates.len()),
                or_dash(ready.map(|c| c.reason.clone())),
            ]);
        }
        table.row(row);
    }
    table.render()
}

/// Reads the elections of `scope` and, through `consul`, their keys.
pub async fn collect(
    client: Client,
    scope: Scope<'_>,
    consul: Option<&ConsulClient>,
) -> Result<Vec<ElectionStatus>, PluginError> {
    let elections = match scope {
        Scope::One { namespace, name } => {
            let api: Api<LeaderElection> = Api::namespaced(client, namespace);
            let election = api
                .get(name)
                .await
                .map_err(|e| PluginError::election_call(namespace, name, "get", e))?;
            vec![election]
        }
        Scope::Namespace(namespace) => list(Api::namespaced(client, namespace), namespace).await?,
        Scope::AllNamespaces => list(Api::all(client), "all namespaces").await?,
    };
    let holders = each_at_once(&elections, |e| consul_holder::read(consul, e)).await;
    let views = elections.iter().zip(holders);
    Ok(views
        .map(|(e, holder)| ElectionStatus::new(e, holder))
        .collect())
}

/// How many elections' keys `status` reads from Consul at once: a cluster's worth of elections
/// is read in about one read's time per batch, not one timeout each, without opening a
/// connection per election.
const CONSUL_READS_AT_ONCE: usize = 8;

/// `read` of each of `elections`, at most [`CONSUL_READS_AT_ONCE`] at a time, in their order.
async fn each_at_once<'a, T, F, Fut>(elections: &'a [LeaderElection], read: F) -> Vec<T>
where
    F: FnMut(&'a LeaderElection) -> Fut,
    Fut: Future<Output = T>,
{
    stream::iter(elections)
        .map(read)
        .buffered(CONSUL_READS_AT_ONCE)
        .collect()
        .await
}

async fn list(api: Api<LeaderElection>, what: &str) -> Result<Vec<LeaderElection>, PluginError> {
    let mut items = api
        .list(&ListParams::default())
        .await
        .map_err(|source| PluginError::Kube {
            operation: format!("list LeaderElections in {what}"),
            source,
        })?
        .items;
    items.sort_by_key(|le| (le.namespace(), le.name_any()));
    Ok(items)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::Barrier;

    use super::*;
    use crate::plugin::fixtures::{election, led_by_web_1};

    fn now() -> Timestamp {
        "2024-05-01T10:00:00Z".parse().expect("timestamp")
    }

    fn held() -> ConsulHolder {
        ConsulHolder::Held {
            key: "elector/prod/web/leader".into(),
            session: "s-1".into(),
            pod: Some("web-1".into()),
            lock_index: 42,
        }
    }

    #[test]
    fn the_table_shows_leader_token_consul_switchover_and_candidates() {
        let mut status = led_by_web_1();
        status["lastSwitchover"] = json!({
            "to": "web-1", "from": "web-0", "leader": "web-1",
            "requestedAt": "2024-05-01T09:56:58Z", "completedAt": "2024-05-01T09:57:00Z",
            "result": "Completed", "message": "moved",
        });
        let view = ElectionStatus::new(&election(json!({}), status), held());
        assert_eq!(
            view.render(now()),
            "Election:         prod/web\n\
             Phase:            Elected\n\
             Leader:           web-1 since 2024-05-01T09:57:00Z (3m ago)\n\
             Fencing token:    42\n\
             Transitions:      3\n\
             Consul holder:    web-1 (session s-1, lock index 42, key elector/prod/web/leader)\n\
             Last switchover:  Completed (to web-1, web-0 -> web-1, requested \
             2024-05-01T09:56:58Z (3m2s ago)): moved\n\
             Candidates:\n  \
               POD    ELIGIBLE  PRIORITY  REASON\n  \
               web-0  yes       0         -\n  \
               web-1  yes       0         -\n  \
               web-2  no        0         NotReady\n"
        );
    }

    #[test]
    fn list_shows_one_line_per_election() {
        let mut status = led_by_web_1();
        status["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "LeaderElected",
            "message": "", "lastTransitionTime": "2024-05-01T09:57:00Z"}]);
        let led = ElectionStatus::new(&election(json!({}), status), held());
        let new = ElectionStatus::new(
            &election(json!({}), json!(null)),
            ConsulHolder::NotAsked {
                reason: "not asked".into(),
            },
        );
        let all = Columns {
            all_namespaces: true,
            wide: None,
        };
        assert_eq!(
            render_list(&[led.clone(), new.clone()], all),
            "NAMESPACE  NAME  PHASE    LEADER  TOKEN  TRANSITIONS  READY\n\
             prod       web   Elected  web-1   42     3            True\n\
             prod       web   -        -       -      0            -\n"
        );
        let one = Columns {
            all_namespaces: false,
            wide: None,
        };
        assert!(render_list(std::slice::from_ref(&led), one).starts_with("NAME  PHASE"));
        assert_eq!(render_list(&[], one), "No LeaderElections found.\n");
        let wide = Columns {
            all_namespaces: false,
            wide: Some("2024-05-01T10:00:00Z".parse().expect("a time")),
        };
        assert_eq!(
            render_list(&[led, new], wide),
            "NAME  PHASE    LEADER  TOKEN  TRANSITIONS  READY  LEADING  ELIGIBLE  REASON\n\
             web   Elected  web-1   42     3            True   3m       2/3       LeaderElected\n\
             web   -        -       -      0            -      -        0/0       -\n"
        );
    }

    #[test]
    fn conditions_are_shown_with_their_messages() {
        let mut status = led_by_web_1();
        status["conditions"] = json!([
            {"type": "Ready", "status": "True", "reason": "LeaderElected",
             "message": "pod web-1 is leader", "lastTransitionTime": "2024-05-01T09:57:00Z"},
            {"type": "ConsulAvailable", "status": "False", "reason": "PermissionDenied",
             "message": "the token lacks session write", "lastTransitionTime": "2024-05-01T09:57:00Z"},
        ]);
        let view = ElectionStatus::new(&election(json!({}), status), held());
        let text = view.render(now());
        assert!(
            text.ends_with(
                "Conditions:\n  \
                   TYPE             STATUS  REASON            MESSAGE\n  \
                   Ready            True    LeaderElected     pod web-1 is leader\n  \
                   ConsulAvailable  False   PermissionDenied  the token lacks session write\n"
            ),
            "{text}"
        );
        let value = serde_json::to_value(&view).expect("serializes");
        assert_eq!(value["conditions"][1]["type"], "ConsulAvailable");
        assert_eq!(
            value["conditions"][1]["message"],
            "the token lacks session write"
        );
    }

    #[test]
    fn an_election_without_status_or_consul_says_so() {
        let view = ElectionStatus::new(
            &election(json!({}), json!(null)),
            ConsulHolder::NotAsked {
                reason: "CONSUL_HTTP_ADDR is not set".into(),
            },
        );
        let text = view.render(now());
        assert!(text.contains("Phase:            -\n"), "{text}");
        assert!(text.contains("Leader:           none\n"), "{text}");
        assert!(
            text.contains("Consul holder:    not asked (CONSUL_HTTP_ADDR is not set)\n"),
            "{text}"
        );
        assert!(text.ends_with("Candidates:       none\n"), "{text}");
        assert_eq!(render_all(&[], now()), "No LeaderElections found.\n");
    }

    #[test]
    fn json_names_every_field_in_camel_case() {
        let view = ElectionStatus::new(&election(json!({}), led_by_web_1()), held());
        let value = serde_json::to_value(&view).expect("serializes");
        assert_eq!(value["leader"], "web-1");
        assert_eq!(value["fencingToken"], 42);
        assert_eq!(value["since"], "2024-05-01T09:57:00Z");
        assert_eq!(value["candidates"][2]["reason"], "NotReady");
        assert_eq!(
            value["candidates"][0]["priority"], 0,
            "explicit, even when 0"
        );
        assert_eq!(value["consul"]["state"], "held");
        assert_eq!(value["consul"]["lockIndex"], 42);
        assert_eq!(value["consul"]["pod"], "web-1");
        assert_eq!(value["lastSwitchover"], serde_json::Value::Null);
    }

    #[tokio::test]
    async fn consul_is_read_for_several_elections_at_once_and_no_more_than_the_bound() {
        let elections: Vec<LeaderElection> = (0..CONSUL_READS_AT_ONCE * 2)
            .map(|_| election(json!({}), led_by_web_1()))
            .collect();
        // Each read waits until a whole batch is in flight: one at a time never gets there.
        let batch = Arc::new(Barrier::new(CONSUL_READS_AT_ONCE));
        let (in_flight, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let read = |_: &LeaderElection| {
            let (batch, in_flight, most) = (batch.clone(), in_flight.clone(), most.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                batch.wait().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                now
            }
        };
        let bound = Duration::from_secs(10);
        let read = tokio::time::timeout(bound, each_at_once(&elections, read)).await;
        let read = read.expect("the reads of a batch wait for each other");
        assert_eq!(read.len(), elections.len());
        assert_eq!(most.load(Ordering::SeqCst), CONSUL_READS_AT_ONCE);
    }
}
