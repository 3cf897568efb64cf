//! Shared helpers of the integration tests: the Consul client against the emulator (here),
//! the CRD's schema ([`crd`]) and `LeaderElection` specs as JSON ([`spec`]).

pub mod crd;
pub mod spec;

use std::time::Duration;

use consul_elector::consul::{
    ConsulAddress, ConsulClient, ConsulSettings, ConsulToken, Overrides, RetryPolicy, WatchPacing,
};
use testkit::consul::{AclConfig, AclPolicy, Emulator, EmulatorConfig};

/// An emulator with the default (manual, virtual) clock and no blocking-query jitter.
pub async fn emulator() -> Emulator {
    emulator_with(EmulatorConfig::default()).await
}

/// An emulator with `config`, jitter off so blocking timeouts are exact.
pub async fn emulator_with(config: EmulatorConfig) -> Emulator {
    consul_elector::install_crypto_provider();
    Emulator::start(EmulatorConfig {
        jitter: false,
        ..config
    })
    .await
    .unwrap()
}

/// An emulator that enforces ACLs: it knows the `(secret, policy)` pairs of `tokens`, and a
/// request without a token may do nothing.
pub async fn emulator_with_tokens<'a>(
    tokens: impl IntoIterator<Item = (&'a str, AclPolicy)>,
) -> Emulator {
    emulator_with(EmulatorConfig {
        acl: Some(AclConfig {
            tokens: tokens
                .into_iter()
                .map(|(secret, policy)| (secret.to_owned(), policy))
                .collect(),
            anonymous: AclPolicy::default(),
        }),
        ..EmulatorConfig::default()
    })
    .await
}

/// Settings pointing at `emu`, with quick retries (3 attempts, at most 5 ms apart).
pub fn settings(emu: &Emulator) -> ConsulSettings {
    ConsulSettings {
        address: ConsulAddress::parse(&emu.url(), false).unwrap(),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
        watch_pacing: WatchPacing {
            burst: 2,
            refill_interval: Duration::from_millis(10),
        },
        ..ConsulSettings::default()
    }
}

/// A client for `emu` with [`settings`].
pub fn client(emu: &Emulator) -> ConsulClient {
    ConsulClient::new(&settings(emu)).unwrap()
}

/// A handle of `consul` whose requests carry `token` instead of its own.
pub fn with_token(consul: &ConsulClient, token: impl Into<String>) -> ConsulClient {
    consul
        .with_overrides(Overrides {
            token: ConsulToken::new(token),
            ..Overrides::default()
        })
        .unwrap()
}
