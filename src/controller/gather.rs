//! The admission inputs, read as the machine asks for them ([`crate::inputs::admission`]).
//! Most are cached and answer at once; a read that takes a request may be awaited across
//! several answers, and meanwhile the machine judges rule 2, since the lock may be lost while
//! it is outstanding ([`Gathered::Awaited`]).

use std::time::Duration;

use futures::FutureExt;

use super::executor::Executor;
use crate::Error;
use crate::election::admission::Input;
use crate::election::machine::Gathered;
use crate::inputs::admission::{self, Answer, Read};

impl Executor<'_> {
    /// Gathers `input`: the input when it is at hand, else [`Gathered::Awaited`] while its
    /// read goes on ([`Self::await_input`]).
    pub fn gather(&mut self, input: Input) -> Gathered {
        let Some(config) = &self.config else {
            let why = format!("{input:?} asked for an election whose spec is invalid");
            return self.failed(Error::InvalidStatus(why));
        };
        match admission::read(input, self.le, self.ctx, config) {
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
    pub async fn await_input(&mut self, recheck: Option<Duration>) -> Gathered {
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
        match admission::answered(answer, self.le, self.ctx, &config) {
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
