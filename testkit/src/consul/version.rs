//! [`EMULATED_VERSION`]: the Consul version the emulator follows.

/// The Consul version whose behaviour the emulator follows, reported as `Config.Version` by
/// `GET /v1/agent/self`. Where Consul's answers changed across versions (`docs/consul.md`,
/// section 13, "Versions"), the emulator answers like this one.
pub const EMULATED_VERSION: &str = "1.22.0";
