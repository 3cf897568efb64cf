//! Rule 7: deleting a LeaderElection releases the key, destroys the session and removes the
//! operator's labels and annotations from every pod it labelled. In Observe mode nothing is
//! written to Consul.

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::act::LOCK_FLAGS;
use super::{Context, consul_access, election_key, observe, sharing};
use crate::Error;
use crate::consul::ConsulClient;
use crate::crd::{LeaderElection, default_key};
use crate::election::config::{ElectionKey, LabelConfig, Mode};
use crate::k8s::PodRole;
use crate::sessions::{Found, adoptable_session};

/// `id`, a session the status names but this process has not adopted, when Consul still has
/// it and its name says this cluster's operator created it for this election: only such a
/// session may be released and destroyed (another cluster's, or anyone's, is left alone).
async fn recorded_session_if_ours(
    consul: &ConsulClient,
    id: String,
    key: &ElectionKey,
    ctx: &Context,
) -> Result<Option<String>, Error> {
    let cluster = &ctx.settings.cluster_name;
    let ours = adoptable_session(consul, &id, cluster, key, Found::InStatus).await?;
    Ok(ours.map(|_| id))
}

/// Cleans up after `le`; idempotent (a failure is retried by the finalizer helper).
pub async fn cleanup(le: &LeaderElection, ctx: &Context) -> Result<Action, Error> {
    let key = election_key(le)?;
    ctx.locks.unwatch(&key);
    let config = crate::crd::validate(le).ok();
    let managed = config.as_ref().is_none_or(|c| c.mode == Mode::Managed);
    let consul_key = config
        .as_ref()
        .map_or_else(|| default_key(&key.namespace, &key.name), |c| c.key.clone());
    let consul = if managed {
        match consul_access::client_for(le, &consul_key, ctx).await {
            Ok(consul) => Some(consul),
            // Never fall back to the operator's own client: that would send its token (or
            // release keys) where this election was never allowed to reach. The session, if
            // any, is no longer renewed and expires in Consul.
            Err(consul_access::AccessProblem::Invalid(problem)) => {
                tracing::warn!(
                    election = %key,
                    %problem,
                    "cleanup without Consul: the election has no usable Consul access"
                );
                ctx.sessions.forget(&key);
                None
            }
            Err(consul_access::AccessProblem::Failed(error)) => return Err(error),
        }
    } else {
        None
    };
    if let Some(consul) = consul {
        let known = ctx.sessions.view(&key).map(|s| s.id);
        let session = match known.clone() {
            Some(id) => Some(id),
            None => match ctx.current_status(le).leader.and_then(|l| l.session_id) {
                Some(id) => recorded_session_if_ours(&consul, id, &key, ctx).await?,
                None => None,
            },
        };
        if let Some(session) = session {
            consul
                .kv_release(&consul_key, &session, &[], LOCK_FLAGS)
                .await?;
            if known.is_some() {
                ctx.sessions.destroy(&key, &consul).await?;
            } else {
                // Named only by the status (not adopted by this process).
                consul.destroy_session(&session).await?;
            }
        }
    }
    let label_key = config.as_ref().map_or_else(
        || crate::crd::DEFAULT_ROLE_LABEL.to_owned(),
        |c| c.labels.key.clone(),
    );
    let labels = LabelConfig {
        key: label_key,
        leader: String::new(),
        follower: String::new(),
    };
    let pods_api = Api::namespaced(ctx.client.clone(), &key.namespace);
    for (pod, _) in observe::pods_of(ctx, le).values() {
        if !sharing::labelled_by(ctx, le, pod) {
            continue;
        }
        let Some(uid) = pod.metadata.uid.as_deref() else {
            continue;
        };
        let annotations = sharing::annotations_for(ctx, &key.name, pod, PodRole::None);
        match sharing::set_role(
            &pods_api,
            &pod.name_any(),
            uid,
            &labels,
            &key.name,
            PodRole::None,
            annotations,
        )
        .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(error) => return Err(Error::kube("patch pod")(error)),
        }
    }
    ctx.remember_status(le, None);
    Ok(Action::await_change())
}
