//! The pure decision core: (spec, candidate pods, lock state, session state, now) -> plan.
//! No I/O and no clock reads; every safety rule of docs/design.md section 2 is a unit test here.

pub mod admission;
pub mod adoption;
pub mod annotation_owner;
pub mod cleanup_deadline;
pub mod config;
pub mod confirmation_pace;
pub mod conflict;
pub mod consul_policy;
pub mod eligibility;
pub mod first_look;
pub mod invariants;
pub mod key_memory;
pub mod key_value;
pub mod label_key_check;
pub mod leadership_history;
pub mod lock_held;
pub mod look_again;
pub mod machine;
pub mod memory;
pub mod not_ready;
pub mod observe;
pub mod observed_token;
pub mod plan;
pub mod plan_loop;
pub mod planner;
pub mod pod_patch;
pub mod reconcile;
pub mod refusal;
pub mod report;
pub mod request;
pub mod session_names;
pub mod spec_edits;
pub mod status_change;
pub mod status_failures;
pub mod switchover_request;
pub mod unusable;
pub mod withdrawal;

#[cfg(test)]
mod tests;
