//! How a pod simulator behaves: [`SimulatorOptions`].

use std::time::Duration;

/// How a [`PodSimulator`](super::PodSimulator) behaves.
#[derive(Debug, Clone)]
pub struct SimulatorOptions {
    /// How many nodes (`sim-node-0..nodes`) pods are bound to round-robin; clamped to
    /// `1..=100`. Default 3.
    pub nodes: usize,
    /// Whether pods become Ready once running (else they stay NotReady until
    /// [`PodSimulator::set_ready`](super::PodSimulator::set_ready)). Default true.
    pub start_ready: bool,
    /// A cap on the grace period honoured for terminating pods. Default `None`: the pod's
    /// own `deletionGracePeriodSeconds`.
    pub max_grace: Option<Duration>,
    /// How long a running pod stays NotReady before it may become Ready (a readiness
    /// probe's initial delay). Default zero.
    pub ready_delay: Duration,
}

impl Default for SimulatorOptions {
    fn default() -> Self {
        Self {
            nodes: 3,
            start_ready: true,
            max_grace: None,
            ready_delay: Duration::ZERO,
        }
    }
}
