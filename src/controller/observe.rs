//! What the machine observes, read as it asks ([`Observable`]) in [`crate::inputs`] and told
//! to it. Most admission inputs are cached and answer at once; a read that takes a request may
//! be awaited across several answers, and meanwhile the machine judges rule 2, since the lock
//! may be lost while it is outstanding ([`Gathered::Awaited`]).

use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use super::executor::Executor;
use crate::Error;
use crate::crd::status_basis::Basis;
use crate::election::admission;
use crate::election::machine::{Election, Gathered, Input, Left, Observable, Opening};
use crate::election::report;
use crate::inputs::admission::{Answer, Read};
use crate::inputs::{self, plan_loop};
use crate::k8s;

impl Executor<'_> {
    /// Observes `what` and tells `election`; fails when the plan loop cannot open.
    pub async fn observe(
        &mut self,
        what: Observable,
        election: &mut Election,
    ) -> Result<(), Error> {
        let input = match what {
            Observable::Input(input) => Input::Gathered(self.gather(input)),
            Observable::Await(recheck) => Input::Gathered(self.await_input(recheck).await),
            Observable::Lock => {
                Input::Lock(inputs::withdrawal::lock_facts(self.le, self.key, self.ctx))
            }
            Observable::Left => {
                tracing::info!(election = %self.key, "withdrawing: {}", election.why());
                Input::Left(self.left())
            }
            Observable::Opening => Input::Opening(self.open()?),
            Observable::World => {
                if let Some(config) = &self.config {
                    plan_loop::plan(election, self.key, self.ctx, config, &self.pods, &self.lock);
                }
                return Ok(());
            }
        };
        election.handle(input, Instant::now());
        Ok(())
    }

    /// Reads what the election left.
    fn left(&mut self) -> Left {
        let (left, acted) = inputs::withdrawal::left(self.le, self.key, self.ctx);
        let consul_key = left.acted.consul_key.clone();
        self.access.acted_on(acted, consul_key);
        left
    }

    /// Reads what the plan loop starts from.
    fn open(&mut self) -> Result<Opening, Error> {
        let Some(config) = &self.config else {
            return Err(Error::InvalidStatus("planning without a valid spec".into()));
        };
        let start = plan_loop::start(self.le, self.key, self.ctx, config);
        self.pods = start.pods;
        self.basis = Some(Basis::of(&start.status));
        Ok(Opening {
            recorded: report::recorded(&start.status),
            switchover: start.switchover,
            version: k8s::resource_version(&self.le.metadata),
            adopting: start.adopting,
        })
    }

    /// Gathers `input`: the input when it is at hand, else [`Gathered::Awaited`] while its
    /// read goes on ([`Self::await_input`]).
    fn gather(&mut self, input: admission::Input) -> Gathered {
        let Some(config) = &self.config else {
            let why = format!("{input:?} asked for an election whose spec is invalid");
            return self.failed(Error::InvalidStatus(why));
        };
        match crate::inputs::admission::read(input, self.le, self.ctx, config) {
            Ok(Read::Found(found)) => Gathered::Found(found),
            Ok(Read::Pending(mut read)) => {
                let locks = self.ctx.locks.subscribe();
                match (&mut read).now_or_never() {
                    Some(answer) => self.answered(answer),
                    None => {
                        self.reading = Some((read, locks));
                        Gathered::Awaited
                    }
                }
            }
            Err(error) => self.failed(error),
        }
    }

    /// Waits for the input being read, and (`Some`) at most `recheck` or until a lock
    /// changes: then it is still [`Gathered::Awaited`].
    async fn await_input(&mut self, recheck: Option<Duration>) -> Gathered {
        let Some((mut read, mut locks)) = self.reading.take() else {
            let why = "an input awaited that is not being read".into();
            return self.failed(Error::InvalidStatus(why));
        };
        let answer = match recheck {
            None => (&mut read).await,
            Some(recheck) => tokio::select! {
                biased;
                answer = &mut read => answer,
                // An error: the lock watcher is gone, the operator is stopping.
                Ok(()) = locks.changed() => {
                    self.reading = Some((read, locks));
                    return Gathered::Awaited;
                }
                () = tokio::time::sleep(recheck) => {
                    self.reading = Some((read, locks));
                    return Gathered::Awaited;
                }
            },
        };
        self.answered(answer)
    }

    /// The input `answer` gives; a usable Consul access is opened for the reconcile.
    fn answered(&mut self, answer: Answer) -> Gathered {
        let Some(config) = self.config.clone() else {
            let why = "an input read for an election whose spec is invalid".into();
            return self.failed(Error::InvalidStatus(why));
        };
        match crate::inputs::admission::answered(answer, self.le, self.ctx, &config) {
            Ok((found, client)) => {
                if let Some(client) = client {
                    self.access.opened(client, config.key.clone());
                }
                Gathered::Found(found)
            }
            Err(error) => self.failed(error),
        }
    }

    /// An input that could not be read: the reconcile fails with `error` once rule 2 is
    /// carried out.
    fn failed(&mut self, error: Error) -> Gathered {
        self.keep(error);
        Gathered::Failed
    }
}
