//! A slow admission read in the model ([`super::Event::SlowRead`]): the next reconcile's read
//! of the pods' owners or of its Consul access (a token Secret) is awaited while the clock
//! runs, as the controller's executor awaits it. Meanwhile the machine judges rule 2 whenever
//! the key changes or the time it named has passed, and the model checks after each judgement
//! that no leader label outlives its lock.

use std::fmt::Write as _;
use std::time::Duration;

use super::Model;
use crate::crd::AppliedSpec;
use crate::election::admission::Input;
use crate::election::config::{Mode, UnavailablePolicy};
use crate::election::eligibility::elapsed;
use crate::election::machine::Gathered;
use crate::election::observe::LockView;

/// A read that takes `left` more seconds, and fails at its end (`fails`).
#[derive(Debug, Clone)]
pub(super) struct SlowRead {
    /// The input being read, once a reconcile asked for one that takes a request.
    input: Option<Input>,
    left: u64,
    fails: bool,
}

impl SlowRead {
    pub(super) fn new(secs: u64, fails: bool) -> SlowRead {
        SlowRead {
            input: None,
            left: secs,
            fails,
        }
    }
}

impl Model {
    /// The executor's start of a read of `input` (`spec`: what the spec makes the operator act
    /// with): awaited when it takes a request and a slow read is due.
    pub(super) fn start_reading(&mut self, input: Input, spec: &AppliedSpec) -> Gathered {
        match (&mut self.slow_read, input) {
            (Some(slow), Input::LabelKey | Input::Access) if slow.input.is_none() => {
                slow.input = Some(input);
                let _ = writeln!(self.trace, "   reading {input:?} for {} s", slow.left);
                *self.seen.entry("a slow admission read".into()).or_default() += 1;
                Gathered::Awaited
            }
            _ => Gathered::Found(self.gather(input, spec)),
        }
    }

    /// The executor's wait for the read under way: until it ends, or (`Some`) until `recheck`
    /// has passed or the key as the watch shows it changed.
    pub(super) fn go_on_reading(
        &mut self,
        recheck: Option<Duration>,
        spec: &AppliedSpec,
    ) -> Gathered {
        self.check_while_awaiting();
        let watched = self.watched_lock();
        let mut waited = Duration::ZERO;
        loop {
            let Some(slow) = self.slow_read.as_mut() else {
                self.fail("an input awaited that is not being read");
            };
            if slow.left == 0 {
                let (input, fails) = (slow.input, slow.fails);
                self.slow_read = None;
                let _ = writeln!(self.trace, "   read {input:?} (failed: {fails})");
                return match (input, fails) {
                    (Some(input), false) => Gathered::Found(self.gather(input, spec)),
                    _ => Gathered::Failed,
                };
            }
            if recheck.is_some_and(|r| !waited.is_zero() && waited >= r) {
                return Gathered::Awaited;
            }
            slow.left -= 1;
            waited += Duration::from_secs(1);
            self.advance(Duration::from_secs(1));
            if recheck.is_some() && self.watched_lock() != watched {
                *self
                    .seen
                    .entry("the key changed during a slow read".into())
                    .or_default() += 1;
                return Gathered::Awaited;
            }
        }
    }

    /// The key as the executor's watch shows it.
    fn watched_lock(&self) -> LockView {
        match self.consul.kv_stalled {
            true => self.cached_lock.clone(),
            false => self.consul.lock_view(),
        }
    }

    /// Rule 2 while a reconcile awaits an input, once the machine judged it (Managed mode; the
    /// applications back Observe mode's labels): no leader label stays on a key the watch
    /// shows held by no session of this election, under any policy; under Fence, none without
    /// its lock a TTL after the key was last read.
    pub(super) fn check_while_awaiting(&mut self) {
        if self.config.mode != Mode::Managed || self.labels_are_another_installs() {
            return;
        }
        let leaders = self.leaders();
        if leaders.is_empty() {
            return;
        }
        let ours = self
            .registered
            .as_ref()
            .map(|r| r.id.clone())
            .or_else(|| self.recorded().leader.and_then(|l| l.session_id));
        let watched = !self.consul.kv_stalled
            && self.consul.kv_reachable().is_ok()
            && !self.election.memory().key.written_since_read();
        let lost = watched
            && self
                .consul
                .holder()
                .is_none_or(|h| Some(h) != ours.as_deref());
        let unbacked = leaders.iter().any(|p| !self.lock_backed(p));
        let stale = self.config.on_consul_unavailable == UnavailablePolicy::Fence
            && self
                .kv_read_at
                .is_some_and(|at| elapsed(at, self.now) >= self.config.session.ttl);
        if lost {
            self.fail(
                "a leader label stayed on a key the watch shows lost while an input was awaited",
            );
        }
        if unbacked && stale {
            self.fail(
                "a leader label without its lock outlived the Fence window while an input was \
                 awaited",
            );
        }
    }
}
