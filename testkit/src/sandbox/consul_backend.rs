//! The Consul the sandbox and the benchmark driver run the operator against: the emulator
//! (the default), or a real `consul agent -dev` from `CONSUL_BIN` behind a [`Meter`] that
//! counts requests the way the emulator does. What both need from Consul beyond its URL
//! (request counters, sessions, renewals, cutting it off, the server's process) is here, once
//! for both kinds.

use std::path::PathBuf;
use std::time::Duration;

use super::error::SandboxError;
use crate::consul::Stats;
use crate::consul::{ClockMode, Emulator, EmulatorConfig, Endpoint, Fault, FaultAction, FaultId};
use crate::real_consul::{self, CONSUL_BIN_ENV, Meter, Options, RealConsul, Shape};

/// Which Consul to run against (`--consul emulator|real`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConsulKind {
    /// The in-process emulator on the real clock.
    #[default]
    Emulator,
    /// A real `consul agent -dev` from `CONSUL_BIN`.
    Real,
}

impl ConsulKind {
    /// The value of `--consul`.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "emulator" => Ok(Self::Emulator),
            "real" => Ok(Self::Real),
            other => Err(format!("--consul takes emulator or real, not {other:?}")),
        }
    }

    /// The name `--consul` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Emulator => "emulator",
            Self::Real => "real",
        }
    }

    /// What to start, resolved before anything slow runs: for [`ConsulKind::Real`], the
    /// binary `CONSUL_BIN` names, and an error naming `CONSUL_BIN` when it is unset.
    pub(crate) fn resolve(self) -> Result<ConsulPlan, SandboxError> {
        match self {
            Self::Emulator => Ok(ConsulPlan::Emulator),
            Self::Real => match real_consul::configured_binary() {
                Ok(Some(binary)) => Ok(ConsulPlan::Real(binary)),
                Ok(None) => Err(SandboxError::Setup(format!(
                    "--consul real needs a Consul binary: set {CONSUL_BIN_ENV} to one (1.0 or \
                     later), e.g. {CONSUL_BIN_ENV}=/path/to/consul"
                ))),
                Err(error) => Err(SandboxError::Setup(format!("--consul real: {error}"))),
            },
        }
    }
}

/// A resolved [`ConsulKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConsulPlan {
    /// The emulator.
    Emulator,
    /// A real dev agent from this binary.
    Real(PathBuf),
}

/// A running Consul of either kind.
#[derive(Debug)]
pub(crate) enum ConsulBackend {
    /// The emulator.
    Emulator(Emulator),
    /// A real dev agent; the operator talks to it through `meter`.
    Real {
        /// The server.
        server: RealConsul,
        /// The counting proxy in front of it.
        meter: Meter,
        /// The binary's version.
        version: real_consul::Version,
    },
}

/// A cut made by [`ConsulBackend::cut`], undone by [`ConsulBackend::restore`].
#[derive(Debug)]
pub(crate) struct Cut(Option<FaultId>);

impl ConsulBackend {
    /// Starts the Consul `plan` names.
    pub(crate) async fn start(plan: ConsulPlan) -> Result<Self, SandboxError> {
        match plan {
            ConsulPlan::Emulator => Emulator::start(EmulatorConfig {
                clock: ClockMode::Tokio,
                ..EmulatorConfig::default()
            })
            .await
            .map(Self::Emulator)
            .map_err(SandboxError::io("starting the Consul emulator")),
            ConsulPlan::Real(binary) => {
                let real = |error: real_consul::RealConsulError| {
                    SandboxError::Setup(format!("the real Consul: {error}"))
                };
                let server = RealConsul::start_with(binary, Shape::Dev, Options::default())
                    .await
                    .map_err(real)?;
                let meter = Meter::start(server.members()[0].direct_addr())
                    .await
                    .map_err(real)?;
                let version = server.version();
                Ok(Self::Real {
                    server,
                    meter,
                    version,
                })
            }
        }
    }

    /// `emulator`, or `real Consul <version>`: which Consul a report was measured on.
    pub(crate) fn name(&self) -> String {
        match self {
            Self::Emulator(_) => "emulator".to_owned(),
            Self::Real { version, .. } => format!("real Consul {version}"),
        }
    }

    /// The URL the operator is given.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Emulator(emulator) => emulator.url(),
            Self::Real { meter, .. } => meter.url(),
        }
    }

    /// What it is, for the start-up lines: `Consul emulator at <url>`, or the real server's
    /// version and process.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Emulator(emulator) => format!("Consul emulator at {}", emulator.url()),
            Self::Real {
                server,
                meter,
                version,
            } => format!(
                "real Consul {version} (consul agent -dev, pid {}) at {}, through a counting \
                 proxy at {}",
                self.server_pid()
                    .map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
                server.members()[0].direct_url(),
                meter.url()
            ),
        }
    }

    /// Request and connection counters (the emulator's own, or the meter's).
    pub(crate) fn stats(&self) -> Stats {
        match self {
            Self::Emulator(emulator) => emulator.stats(),
            Self::Real { meter, .. } => meter.stats(),
        }
    }

    /// Zeroes the counters.
    pub(crate) fn reset_stats(&self) {
        match self {
            Self::Emulator(emulator) => emulator.reset_stats(),
            Self::Real { meter, .. } => meter.reset_stats(),
        }
    }

    /// How many sessions Consul holds.
    pub(crate) async fn session_count(&self) -> Result<usize, String> {
        match self {
            Self::Emulator(emulator) => Ok(emulator.sessions().len()),
            Self::Real { server, .. } => server
                .session_count()
                .await
                .map_err(|error| error.to_string()),
        }
    }

    /// A value that grows with every renewal of `session`: the emulator's TTL deadline of it
    /// (`None`: no such session), or when the meter last saw a renewal of it accepted (zero:
    /// none seen yet).
    pub(crate) fn renewal_mark(&self, session: &str) -> Option<Duration> {
        match self {
            Self::Emulator(emulator) => emulator.session(session).and_then(|s| s.deadline),
            Self::Real { meter, .. } => Some(meter.last_renewal(session).unwrap_or_default()),
        }
    }

    /// Makes Consul unreachable for the operator: every request's connection is dropped
    /// (requests already in flight finish).
    pub(crate) fn cut(&self) -> Cut {
        match self {
            Self::Emulator(emulator) => Cut(Some(
                emulator.add_fault(Fault::always(Endpoint::Any, FaultAction::DropConnection)),
            )),
            Self::Real { meter, .. } => {
                meter.set_dropping(true);
                Cut(None)
            }
        }
    }

    /// Undoes a [`ConsulBackend::cut`].
    pub(crate) fn restore(&self, cut: Cut) {
        match (self, cut) {
            (Self::Emulator(emulator), Cut(Some(fault))) => emulator.remove_fault(fault),
            (Self::Real { meter, .. }, _) => meter.set_dropping(false),
            (Self::Emulator(_), Cut(None)) => {}
        }
    }

    /// The Consul server's process, when it is one of its own (a real server); the emulator
    /// runs inside this process.
    pub(crate) fn server_pid(&self) -> Option<u32> {
        match self {
            Self::Emulator(_) => None,
            Self::Real { server, .. } => server.members()[0].pid(),
        }
    }

    /// Stops it.
    pub(crate) async fn shut_down(self) {
        match self {
            Self::Emulator(emulator) => emulator.shutdown().await,
            Self::Real { server, meter, .. } => {
                drop(meter);
                drop(server);
            }
        }
    }
}
