//! Tests of the pure planner, one file per safety rule of DESIGN.md section 2, plus Observe
//! mode and the reported status.

mod support;

mod observe_mode;
mod rule1_one_leader;
mod rule2_lock_held;
mod rule3_restart;
mod rule4_moves;
mod rule5_stickiness;
mod rule6_token;
mod status;
