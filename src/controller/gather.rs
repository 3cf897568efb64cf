//! The admission inputs that take a request (the pods' owners, the election's Consul access,
//! which may read a token Secret), and rule 2 while they are awaited: the election's lock may
//! be lost meanwhile, and the Fence must not wait for them. While they are outstanding the
//! leader label is judged as for an election that cannot act
//! ([`crate::election::unusable::waiting_label`]), again at the deadline that judgement names
//! and whenever a lock changes, and fenced as soon as it says so.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;

use super::executor::Executor;
use crate::Error;
use crate::cache::views;
use crate::consul_access::{self, AccessProblem};
use crate::election::admission::{Access, Input};
use crate::election::label_key_check::check_label_key;
use crate::election::reconcile::Found;
use crate::election::report::spec_problems;
use crate::election::request;
use crate::election::unusable::{UnusableLabel, waiting_label};
use crate::election::withdrawal::{Performed, Withdrawal};
use crate::inputs::{self, admission};

impl Executor<'_> {
    /// Gathers `input` (`written_since_read`: this process wrote the key since it last read
    /// it back). Reads that wait for the API server or a Secret are [`Self::fenced_while`].
    pub async fn gather(&mut self, input: Input, written_since_read: bool) -> Result<Found, Error> {
        let (le, key, ctx) = (self.le, self.key, self.ctx);
        let Some(config) = self.config.clone() else {
            return Err(Error::InvalidStatus(format!(
                "{input:?} asked for an election whose spec is invalid"
            )));
        };
        Ok(match input {
            Input::Spec => {
                return Err(Error::InvalidStatus(
                    "the spec's validation asked for twice".into(),
                ));
            }
            Input::LabelKey => {
                // A label key the pods' controller selects: writing it would make the
                // controller disown the pods and create others, without end.
                let selected = admission::selected_pods(le, ctx, &key.namespace);
                let owners = ctx.caches.owner_selectors.of_pods(&ctx.client, &selected);
                let owners = self.fenced_while(written_since_read, owners).await?;
                Found::LabelKey(check_label_key(&config.labels.key, &owners))
            }
            Input::Older => Found::Older(views::conflicting_election(&ctx.caches, le, &config)),
            Input::YieldingLeader => {
                Found::YieldingLeader(views::yielding_leader(&ctx.caches, le, &config))
            }
            Input::Access => {
                let access = consul_access::client_for(le, &config.key, ctx);
                Found::Access(match self.fenced_while(written_since_read, access).await? {
                    Ok(client) => {
                        self.access.opened(client, config.key.clone());
                        Access::Usable
                    }
                    Err(AccessProblem::Invalid(problem)) => Access::Invalid {
                        spec_valid: spec_problems(&[problem]),
                        in_use: admission::access_in_use(le, ctx, &config),
                    },
                    Err(AccessProblem::Failed(error)) => {
                        // Retried soon, and perhaps failing as fast again: rule 2 does not
                        // wait for it.
                        self.fence_if_due(written_since_read).await?;
                        return Err(error);
                    }
                })
            }
            Input::Applied => {
                let edit = admission::edit(le, ctx, &config);
                Found::Applied {
                    edited: edit.is_some(),
                    needs_withdrawal: edit.is_some_and(|e| e.needs_withdrawal),
                }
            }
        })
    }

    /// `inputs` (reads only, so nothing is lost by waiting on them after a fence), with the
    /// leader label fenced meanwhile when rule 2 asks for it. A failure of the fence itself
    /// ends the wait: the reconcile fails and is retried.
    async fn fenced_while<T>(
        &mut self,
        written_since_read: bool,
        inputs: impl Future<Output = T>,
    ) -> Result<T, Error> {
        let mut inputs = std::pin::pin!(inputs);
        let mut locks = self.ctx.locks.subscribe();
        // Most inputs are cached and answer at once: judge only while one is awaited.
        if let Some(gathered) = (&mut inputs).now_or_never() {
            return Ok(gathered);
        }
        loop {
            let recheck = match self.verdict(written_since_read) {
                UnusableLabel::Keep(recheck) => recheck,
                UnusableLabel::Fence => Duration::ZERO,
            };
            tokio::select! {
                biased;
                gathered = &mut inputs => return Ok(gathered),
                changed = locks.changed() => {
                    if changed.is_err() {
                        // The lock watcher is gone: the operator is stopping.
                        return Ok(inputs.await);
                    }
                }
                () = tokio::time::sleep(recheck) => {
                    if self.fence_if_due(written_since_read).await?.is_none() {
                        // Nothing more for rule 2 to take away until the planner runs.
                        return Ok(inputs.await);
                    }
                }
            }
        }
    }

    /// Fences the leader label if rule 2 asks for it now (and returns `None`); otherwise
    /// returns when to judge again. For a reconcile whose inputs failed: a read that fails at
    /// once never waits, so [`Self::fenced_while`] may not have judged at all.
    async fn fence_if_due(&mut self, written_since_read: bool) -> Result<Option<Duration>, Error> {
        match self.verdict(written_since_read) {
            UnusableLabel::Keep(recheck) => Ok(Some(recheck)),
            UnusableLabel::Fence => {
                let left = self.left();
                let requests = left.requests();
                // Only labels: fencing plans no Consul step.
                let mut fence = Withdrawal::fence(left.footprint(false), &left.pods);
                while let Some(step) = fence.poll() {
                    let (outcome, error) = self.perform(requests.request(step)).await;
                    let performed = request::performed(outcome);
                    if let (Performed::Failed, Some(error)) = (&performed, error) {
                        return Err(error);
                    }
                    fence.done(performed);
                }
                Ok(None)
            }
        }
    }

    fn verdict(&self, written_since_read: bool) -> UnusableLabel {
        let (le, key, ctx) = (self.le, self.key, self.ctx);
        let Some(config) = &self.config else {
            return UnusableLabel::Keep(Duration::MAX);
        };
        let facts = inputs::withdrawal::lock_facts(le, key, ctx);
        facts.judge(false, written_since_read, |lock, now, ttl| {
            waiting_label(lock, now, ttl, config.mode, config.on_consul_unavailable)
        })
    }
}
