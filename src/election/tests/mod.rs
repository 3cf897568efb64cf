//! Tests of the pure planner, one file per safety rule of docs/design.md section 2, plus Observe
//! mode, the reported status, and property tests against a model of Kubernetes and Consul.

mod model;
pub(super) mod support;

mod fencing_causes;
mod invariants;
mod machine;
mod observe_mode;
mod pause;
mod plan_loop;
mod priorities;
mod properties;
mod rule1_one_leader;
mod rule2_lock_held;
mod rule3_restart;
mod rule4_moves;
mod rule5_stickiness;
mod rule6_token;
mod rule7_cleanup;
mod rule8_one_writer;
mod shared_pods;
mod status;
mod switchover;
