//! The Consul a harness' operator talks to: the emulator (with its hooks: faults, stats,
//! virtual sessions), or a real Consul server (`testkit::real_consul`, from `CONSUL_BIN`).
//! Tests that need no emulator-only hook run on both ([`Backend`]).

use std::net::SocketAddr;
use std::sync::Arc;

use testkit::consul::{ClockMode, Emulator, EmulatorConfig};
use testkit::real_consul::{Options, RealConsul, Shape};

/// Which Consul a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The in-process emulator on the real-time clock.
    Emulator,
    /// A real `consul agent -dev` (skipped visibly without `CONSUL_BIN`).
    RealConsul,
}

/// A running Consul of either kind; clones share it.
#[derive(Debug, Clone)]
pub enum ConsulUnderTest {
    /// The emulator.
    Emulator(Emulator),
    /// A real server.
    Real(Arc<RealConsul>),
}

/// The lock fields of a key, as either backend reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLock {
    /// The holding session.
    pub session: Option<String>,
    /// The key's LockIndex.
    pub lock_index: u64,
    /// The key's ModifyIndex (unchanged: nobody wrote the key, not even an acquire by its
    /// holder).
    pub modify_index: u64,
}

impl ConsulUnderTest {
    /// Starts `backend`; `None` when it is a real Consul and no binary is configured (the
    /// harness printed `SKIPPED`), so the test returns at once.
    pub async fn start(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Emulator => Some(Self::emulator().await),
            Backend::RealConsul => Self::real(Shape::Dev, Options::default()).await,
        }
    }

    /// The emulator on the real-time clock.
    pub async fn emulator() -> Self {
        let emu = Emulator::start(EmulatorConfig {
            clock: ClockMode::Tokio,
            ..EmulatorConfig::default()
        })
        .await
        .expect("emulator");
        Self::Emulator(emu)
    }

    /// A real Consul of `shape`; `None` without `CONSUL_BIN` (outside CI).
    pub async fn real(shape: Shape, options: Options) -> Option<Self> {
        RealConsul::start(shape, options)
            .await
            .expect("real consul")
            .map(|real| Self::Real(Arc::new(real)))
    }

    /// The address the operator is given.
    pub fn url(&self) -> String {
        match self {
            Self::Emulator(emu) => emu.url(),
            Self::Real(real) => real.url(),
        }
    }

    /// Where an outside client (an application) connects: the emulator, or the real
    /// Consul's first running member directly (not through the operator's proxy).
    pub fn app_addr(&self) -> SocketAddr {
        match self {
            Self::Emulator(emu) => emu.addr(),
            Self::Real(real) => {
                let member = real
                    .members()
                    .iter()
                    .find(|m| m.is_running())
                    .unwrap_or(&real.members()[0]);
                let url = url::Url::parse(&member.direct_url()).expect("member url");
                let host = url.host_str().expect("host");
                format!("{host}:{}", url.port().expect("port"))
                    .parse()
                    .expect("socket address")
            }
        }
    }

    /// The ACL token outside requests carry (the master token of a real Consul with ACLs).
    pub fn app_token(&self) -> Option<&str> {
        match self {
            Self::Emulator(_) => None,
            Self::Real(real) => real.master_token(),
        }
    }

    /// The emulator; a test that calls this needs an emulator-only hook.
    pub fn emu(&self) -> &Emulator {
        match self {
            Self::Emulator(emu) => emu,
            Self::Real(_) => panic!("this test needs the emulator's hooks"),
        }
    }

    /// The emulator when that is the backend: a test that runs on both backends checks what
    /// only the emulator's hooks can see (lock-delays, request counts) in this branch.
    pub fn as_emulator(&self) -> Option<&Emulator> {
        match self {
            Self::Emulator(emu) => Some(emu),
            Self::Real(_) => None,
        }
    }

    /// The real Consul; a test that calls this needs the real server's handles.
    pub fn real_consul(&self) -> &RealConsul {
        match self {
            Self::Real(real) => real,
            Self::Emulator(_) => panic!("this test needs a real Consul"),
        }
    }
}
