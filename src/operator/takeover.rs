//! Eager adoption: when this replica becomes the active one (at start, or a standby taking
//! over), it takes over every session of this cluster at once, before the first reconcile.
//!
//! Without it, sessions are adopted one reconcile at a time; with many elections the last
//! ones are reached after their sessions expired (2×TTL after the previous process' last
//! renewal), and their leaders are demoted and re-elected although nothing failed.
//!
//! First, before the elections are even listed, every session of this cluster in the
//! operator's own Consul is renewed once ([`keep_alive`]): listing thousands of elections
//! takes seconds, and those seconds come off the sessions' 2×TTL.
//!
//! Then one `GET /v1/session/list` per Consul access the managed elections use (the operator's own,
//! and each allowed address, datacenter and token an election names) returns every session
//! there; those named
//! `consul-elector/<this cluster>/<this install>/<namespace>/<election>/<pod>` ([`session_name`]) are
//! candidates. An election with exactly one candidate gets it adopted (renewed at once, then
//! every TTL/2) for its pod when its status records that session for that pod
//! ([`vouched_by_status`]: a name alone proves nothing, anybody may name a session so). An
//! election with several candidates (a move was interrupted), or one its status does not
//! record, is left to the reconcile's own adoption, which reads the key to see which session
//! holds it and for whom.
//!
//! [`session_name`]: crate::election::session_names::session_name

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::keys::election_key;
use crate::consul::{
    ConsulAddress, ConsulClient, QueryOptions, SessionEntry, Tenancy, TokenIdentity,
};
use crate::consul_access;
use crate::context::Context;
use crate::crd::LeaderElection;
use crate::crd::applied::recorded_session;
use crate::election::adoption::{FoundSettings, settings_match, vouched_by_status};
use crate::election::config::{ElectionKey, Mode, Owner};
use crate::election::session_names::{Found, adoptable_pod, named_by, sole_sessions};
use crate::observers::sessions::found_settings;

/// Adoptions (each one renewal, plus a Secret read for elections with their own token) in
/// flight at once.
const CONCURRENCY: usize = 32;

/// One session to adopt.
struct Candidate {
    key: ElectionKey,
    session: String,
    pod: String,
    settings: FoundSettings,
}

/// Logs a warning for every managed election whose session TTL is too short to outlive a
/// failover of the operator's replicas (its status carries the same as the
/// `LeaseTimingSafe` condition).
pub fn warn_short_ttls(ctx: &Context) {
    for le in ctx.caches.elections.state() {
        let Ok(key) = election_key(&le) else {
            continue;
        };
        let Ok(config) = ctx.caches.validated.of(&key, &le) else {
            continue;
        };
        if config.mode != Mode::Managed {
            continue;
        }
        let timing = ctx.settings.lease.timing_condition(config.session.ttl);
        if !timing.status {
            tracing::warn!(
                election = %format!("{}/{}", le.metadata.namespace.as_deref().unwrap_or_default(), le.metadata.name.as_deref().unwrap_or_default()),
                reason = timing.reason,
                "{}",
                timing.message
            );
        }
    }
}

/// Renews every session of this cluster in the operator's own Consul once, right after this
/// replica became active and before the elections are even listed (with thousands of
/// elections that list takes seconds, and the previous process' last renewals are getting
/// old). A renewal only keeps a session alive: it changes no lock and registers nothing, and
/// only sessions whose name carries this cluster's identity are touched. [`adopt_all`]
/// registers them once the elections are known. Returns how many were renewed.
pub async fn keep_alive(ctx: &Context) -> usize {
    let sessions = match ctx.consul.list_sessions(QueryOptions::default()).await {
        Ok(reply) => reply.value,
        Err(error) => {
            tracing::warn!(%error, "listing Consul sessions to keep them alive failed");
            return 0;
        }
    };
    let ours: Vec<String> = this_installs(&ctx.settings.owner, &sessions)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let renewed = futures::stream::iter(ours)
        .map(|id| {
            let consul = ctx.consul.clone();
            async move { consul.renew_session(&id).await.is_ok() }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|renewed| futures::future::ready(*renewed))
        .count()
        .await;
    tracing::info!(
        renewed,
        "renewed this cluster's Consul sessions before adopting them"
    );
    renewed
}

/// The IDs of the sessions named for `owner` ([`named_by`]).
fn this_installs<'s>(owner: &Owner, sessions: &'s [SessionEntry]) -> Vec<&'s str> {
    sessions
        .iter()
        .filter(|s| named_by(&s.name, owner))
        .map(|s| s.id.as_str())
        .collect()
}

/// Adopts this cluster's sessions ([module docs](self)); returns how many were adopted.
/// Failures are logged: the reconciles adopt what is left.
pub async fn adopt_all(ctx: &Context) -> usize {
    let started = Instant::now();
    let mut found_all = Vec::new();
    for (consul, elections) in accesses(ctx).await {
        match consul.list_sessions(QueryOptions::default()).await {
            Ok(reply) => {
                let named = candidates(&ctx.settings.owner, &reply.value);
                let recorded = recorded_candidates(ctx, &elections, &named, &reply.value);
                found_all.extend(
                    named
                        .into_iter()
                        .filter(|candidate| elections.contains(&candidate.key))
                        .chain(recorded),
                );
            }
            Err(error) => tracing::warn!(
                consul = %consul.address(),
                %error,
                "listing Consul sessions to adopt failed; adopting them one reconcile at a time"
            ),
        }
    }
    let found = found_all.len();
    let adopted = futures::stream::iter(found_all)
        .map(|candidate| adopt_one(ctx, candidate))
        .buffer_unordered(CONCURRENCY)
        .filter(|adopted| futures::future::ready(*adopted))
        .count()
        .await;
    tracing::info!(
        found,
        adopted,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "adopted this cluster's Consul sessions"
    );
    adopted
}

/// The Consul accesses of the managed elections (address, datacenter, Enterprise namespace and
/// partition, and token), each with a
/// client and the elections that use it. Elections without overrides share the operator's own
/// client without any lookup; the others are resolved like their reconciles resolve them
/// (reading an opted-in token Secret), and are skipped when that fails.
async fn accesses(ctx: &Context) -> Vec<(ConsulClient, HashSet<ElectionKey>)> {
    type Access = (ConsulAddress, Option<String>, Tenancy, TokenIdentity);
    let mut groups: HashMap<Access, (ConsulClient, HashSet<ElectionKey>)> = HashMap::new();
    for le in ctx.caches.elections.state() {
        let Ok(key) = election_key(&le) else {
            continue;
        };
        let Ok(config) = ctx.caches.validated.of(&key, &le) else {
            continue;
        };
        if config.mode != Mode::Managed {
            continue;
        }
        let consul = if le.spec.consul.is_none() {
            ctx.consul.clone()
        } else {
            match consul_access::client_for(&le, &config.key, ctx).await {
                Ok(consul) => consul,
                Err(_) => continue,
            }
        };
        let access = (
            consul.address().clone(),
            consul.datacenter().map(str::to_owned),
            consul.tenancy().clone(),
            consul.token_identity(),
        );
        groups
            .entry(access)
            .or_insert_with(|| (consul, HashSet::new()))
            .1
            .insert(key);
    }
    groups.into_values().collect()
}

/// The sessions to adopt before the first reconcile ([`sole_sessions`]).
fn candidates(owner: &Owner, sessions: &[SessionEntry]) -> Vec<Candidate> {
    let named = sessions.iter().map(|s| (s.name.as_str(), s));
    sole_sessions(owner, named)
        .into_iter()
        .map(|(key, pod, session)| Candidate {
            session: session.id.clone(),
            key,
            pod: pod.to_owned(),
            settings: found_settings(session),
        })
        .collect()
}

/// For the `elections` without a candidate in `named`: the session their status records, when
/// Consul still has it under a name an earlier version of this cluster's operator gave it
/// (adoptable only because the status, which only the operator writes, records it).
fn recorded_candidates(
    ctx: &Context,
    elections: &HashSet<ElectionKey>,
    named: &[Candidate],
    sessions: &[SessionEntry],
) -> Vec<Candidate> {
    let by_id: HashMap<&str, &SessionEntry> = sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    let covered: HashSet<&ElectionKey> = named.iter().map(|c| &c.key).collect();
    elections
        .iter()
        .filter(|key| !covered.contains(key))
        .filter_map(|key| {
            let reference = ObjectRef::<LeaderElection>::new(&key.name).within(&key.namespace);
            let le = ctx.caches.elections.get(&reference)?;
            let status = ctx.caches.current_status(&le);
            let leader = status.leader.as_ref()?;
            let session = by_id.get(leader.session_id.as_deref()?)?;
            let pod = adoptable_pod(&session.name, &ctx.settings.owner, key, Found::InStatus)?;
            (pod == leader.pod).then(|| Candidate {
                key: key.clone(),
                session: session.id.clone(),
                pod: pod.to_owned(),
                settings: found_settings(session),
            })
        })
        .collect()
}

/// Adopts one candidate if its election is managed, valid and still knows the pod.
async fn adopt_one(ctx: &Context, candidate: Candidate) -> bool {
    let Candidate {
        key,
        session,
        pod,
        settings,
    } = candidate;
    let reference = ObjectRef::<LeaderElection>::new(&key.name).within(&key.namespace);
    let Some(le) = ctx.caches.elections.get(&reference) else {
        return false;
    };
    let Ok(config) = ctx.caches.validated.of(&key, &le) else {
        return false;
    };
    if config.mode != Mode::Managed || ctx.sessions.view(&key).is_some() {
        return false;
    }
    // Only the status vouches for a session at a takeover: one it does not record is left
    // to the reconcile, which reads the key.
    let status = ctx.caches.current_status(&le);
    let recorded = crate::election::report::recorded(&status);
    let Some(uid) = vouched_by_status(recorded.leader.as_ref(), &session, &pod) else {
        return false;
    };
    let applied = recorded_session(status.applied.as_ref());
    if !settings_match(&settings, applied.as_ref(), &config.session) {
        return false;
    }
    let Ok(consul) = consul_access::client_for(&le, &config.key, ctx).await else {
        return false;
    };
    match ctx
        .sessions
        .adopt(&key, &consul, &session, &pod, &uid)
        .await
    {
        Ok(adopted) => {
            if adopted {
                tracing::info!(election = %key, session, pod, "adopted session");
            }
            adopted
        }
        Err(error) => {
            tracing::warn!(election = %key, session, %error, "adopting a session failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, name: &str) -> SessionEntry {
        serde_json::from_value(serde_json::json!({"ID": id, "Name": name})).unwrap()
    }

    #[test]
    fn the_candidates_carry_the_listed_session_and_its_settings() {
        let owner = Owner::new("blue", "ops.ce");
        let sessions = [
            entry("1", "consul-elector/blue/ops.ce/shop/web/web-0"),
            entry("2", "consul-elector/blue/ops.ce/shop/api/api-0"),
            entry("3", "consul-elector/blue/ops.ce/shop/api/api-1"),
        ];
        assert_eq!(this_installs(&owner, &sessions), vec!["1", "2", "3"]);
        let found = candidates(&owner, &sessions);
        assert_eq!(found.len(), 1, "shop/api has two sessions");
        let only = &found[0];
        assert_eq!((only.session.as_str(), only.pod.as_str()), ("1", "web-0"));
        assert_eq!(only.key.to_string(), "shop/web");
        assert_eq!(only.settings, found_settings(&sessions[0]));
    }
}
