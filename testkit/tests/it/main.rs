//! The test kit's own tests, in one binary: the test cluster, the Consul emulator and a real
//! Consul, the fault layer and the recorder, the pod simulator, and the sandbox and workload
//! binaries. (The Consul conformance suite is a binary of its own: `consul_conformance`.)
//!
//! Run one file's tests by its module path: `cargo test -p testkit --test it pods_smoke::`.

mod cluster_smoke;
mod consul_emulator_smoke;
mod faults_and_recorder;
mod pods_smoke;
mod real_consul_smoke;
mod sandbox_run;
mod workload_bin;
