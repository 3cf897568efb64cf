//! Conformance suite for Consul's HTTP API: the cases of section 13 of `docs/consul.md`,
//! each run against every target in one `cargo test -p testkit --test consul_conformance`.
//!
//! # Targets
//! Every case `case_NN_...` (an `async fn(&Target)` in its topic module) becomes two tests:
//! - `emulator::case_NN_...`: the in-process `testkit` emulator with its virtual clock, so
//!   TTLs, lock-delays and blocking timeouts are driven by advancing time, never by waiting
//!   for it. The emulator reports version [`testkit::consul::EMULATED_VERSION`].
//! - `real_consul::case_NN_...`: a real Consul. With `CONSUL_BIN` set, each case gets its own
//!   `consul agent -dev` (about a second to start), or its own three-server cluster for the
//!   leader-change cases, from `testkit::real_consul`: cases never share a Raft index, so they
//!   may run in parallel. With `CONSUL_HTTP_ADDR` set (and optionally `CONSUL_HTTP_TOKEN`),
//!   the dev-shaped cases run instead against that external agent, one at a time, each under
//!   its own key prefix `conformance/<case>-<random>/`, destroying the sessions it created.
//!   With neither, the harness prints `SKIPPED: ...` and the test passes.
//!
//! Cases that need something only the emulator offers print
//! `SKIPPED case N against real Consul: needs ...` and pass: 11, 13, 45 (catalog hooks:
//! making a check critical, registering a check), 21 (partly), 22, 23, 24, 44, 66, 73 (virtual
//! time; waiting 20 s to 10 min of real time per case is not worth it), 5 and 12 (partly),
//! 57 (partly, on an external agent only: an empty KV store), 69 (an ACL table), 71 and 74
//! (fault injection).
//!
//! # Versions
//! Where Consul's answer changed across versions, the case reads the server's version
//! ([`Target::version`]) and asserts what that version does (`docs/consul.md` §13,
//! "Versions").
//!
//! # Coverage
//! All cases are implemented; none is excluded. Where a case states a timing ("returns
//! after 1.0 s to 1.0625 s"), the emulator run checks both bounds on the virtual clock and the
//! real run checks them on the wall clock with a small allowance for network latency.
//! Cases 72-75 describe the Go client's `api.Lock`; `go_lock.rs` re-states that algorithm over
//! raw HTTP and runs it against the target, so what is checked is that the server answers the
//! way that client relies on. Cases 76-78 change the Raft leader of a three-server cluster
//! (the emulator's leader switch and election hook stand in for it).

mod blocking;
mod errors;
mod go_lock;
mod invalidation;
mod kv;
mod leader;
mod locks;
mod sessions;
mod target;
mod ttl;

use target::{Backend, Setup, Target};

/// Runs one case on one backend: starts the target (or returns when a real Consul is not
/// configured), runs the case, then cleans up what it left on a shared agent.
async fn run<F: AsyncFnOnce(&Target)>(backend: Backend, name: &str, setup: Setup, case: F) {
    let Some(target) = Target::start(backend, name, setup).await else {
        return;
    };
    case(&target).await;
    target.cleanup().await;
}

/// Generates, for each `module::case_NN_name [=> setup];`, the tests
/// `emulator::case_NN_name` and `real_consul::case_NN_name`.
macro_rules! cases {
    ($($module:ident :: $case:ident $(=> $setup:expr)?;)*) => {
        /// Every case against the in-process emulator.
        mod emulator {
            #[allow(unused_imports)]
            use crate::{errors, target::Setup};
            $(
                #[tokio::test]
                async fn $case() {
                    crate::run(
                        crate::target::Backend::Emulator,
                        stringify!($case),
                        cases!(@setup $($setup)?),
                        crate::$module::$case,
                    )
                    .await;
                }
            )*
        }

        /// Every case against a real Consul (`CONSUL_BIN` or `CONSUL_HTTP_ADDR`).
        mod real_consul {
            #[allow(unused_imports)]
            use crate::{errors, target::Setup};
            $(
                #[tokio::test]
                async fn $case() {
                    crate::run(
                        crate::target::Backend::Real,
                        stringify!($case),
                        cases!(@setup $($setup)?),
                        crate::$module::$case,
                    )
                    .await;
                }
            )*
        }
    };
    (@setup) => { crate::target::Setup::default() };
    (@setup $setup:expr) => { $setup };
}

cases! {
    sessions::case_01_create_with_no_body_applies_defaults;
    sessions::case_02_ttl_below_minimum_is_rejected_and_creates_nothing;
    sessions::case_03_ttl_bounds_are_inclusive_and_echoed_verbatim;
    sessions::case_04_ttl_without_unit_is_invalid;
    sessions::case_05_zero_ttl_means_no_expiry;
    sessions::case_06_behavior_is_case_sensitive;
    sessions::case_07_lock_delay_string_without_unit_fails_decoding;
    sessions::case_08_lock_delay_units_threshold_and_no_upper_bound;
    sessions::case_09_unknown_node_is_rejected;
    sessions::case_10_unknown_node_check_is_rejected;
    sessions::case_11_critical_serf_health_blocks_default_create;
    sessions::case_12_session_without_node_checks_survives_critical_serf_health;
    sessions::case_13_legacy_checks_add_to_serf_health;
    sessions::case_14_destroy_removes_the_session_and_bumps_the_index;
    sessions::case_15_destroy_of_unknown_or_malformed_session_is_idempotent;
    sessions::case_16_missing_path_segments_are_400;
    sessions::case_17_renew_writes_nothing;
    sessions::case_18_renew_of_unknown_session_is_404;
    sessions::case_19_renew_with_get_is_405;
    sessions::case_20_info_and_node_of_unknown_are_empty_arrays;
    ttl::case_21_unrenewed_session_expires_at_twice_the_ttl;
    ttl::case_22_renew_rearms_the_timer;
    ttl::case_23_expiry_releases_the_key_and_starts_lock_delay;
    ttl::case_24_leader_election_rearms_every_ttl_timer;
    locks::case_25_acquire_creates_an_absent_key;
    locks::case_26_acquire_of_a_key_held_by_another_session_fails;
    locks::case_27_reacquire_by_the_holder_keeps_the_lock_index;
    locks::case_28_identical_reacquire_is_a_no_op_that_wakes_nobody;
    locks::case_29_acquire_of_an_unlocked_key_increments_the_lock_index;
    locks::case_30_acquire_with_a_session_that_never_existed_is_500;
    locks::case_31_acquire_with_an_empty_session_is_500;
    locks::case_32_acquire_with_cas_is_conflicting;
    locks::case_33_flags_are_replaced_on_every_acquire;
    locks::case_34_release_unlocks_without_lock_delay;
    locks::case_35_release_by_a_non_holder_fails;
    locks::case_36_release_of_absent_or_unlocked_key_fails;
    locks::case_37_release_with_an_empty_body_clears_the_value;
    locks::case_38_release_with_an_empty_session_is_500;
    invalidation::case_39_destroy_releases_and_arms_the_lock_delay;
    invalidation::case_40_lock_delay_answers_false_before_validating_the_session;
    invalidation::case_41_lock_delay_blocks_only_acquire;
    invalidation::case_42_delete_behavior_removes_the_key;
    invalidation::case_43_zero_lock_delay_frees_the_key_at_once;
    invalidation::case_44_lock_delay_is_capped_at_sixty_seconds;
    invalidation::case_45_critical_check_releases_every_key_in_one_index;
    invalidation::case_46_release_before_destroy_leaves_no_lock_delay;
    kv::case_47_plain_put_on_a_held_key_keeps_the_session_but_resets_lock_index;
    kv::case_48_cas_zero_creates_only_when_absent;
    kv::case_49_cas_compares_the_modify_index;
    kv::case_50_non_numeric_cas_or_flags_is_500;
    kv::case_51_delete_with_cas;
    kv::case_52_delete_absent_recurse_and_conflicting_flags;
    kv::case_53_value_size_limit_is_inclusive;
    kv::case_54_missing_key_is_404_with_meta_headers;
    kv::case_55_get_returns_an_array_and_the_key_index;
    kv::case_56_raw_returns_the_bytes;
    kv::case_57_recurse_and_keys_on_missing_prefixes;
    kv::case_58_keys_with_separator_truncates_and_deduplicates;
    kv::case_59_get_without_key_is_400;
    blocking::case_60_blocking_get_times_out_after_wait_plus_jitter;
    blocking::case_61_blocking_get_returns_when_the_key_changes;
    blocking::case_62_writes_to_other_keys_do_not_wake_a_key_query;
    blocking::case_63_blocking_on_a_missing_key_waits_for_that_key;
    blocking::case_64_bad_blocking_parameters_are_400;
    blocking::case_65_an_index_from_the_future_blocks_then_returns_the_smaller_index;
    blocking::case_66_wait_is_clamped_and_defaults_to_five_minutes;
    blocking::case_67_invalidation_wakes_a_watcher_of_the_held_key;
    blocking::case_68_index_zero_is_not_blocking;
    errors::case_69_acl_denials => Setup::config(errors::acl_config());
    errors::case_70_wrong_method_on_session_create_is_405;
    errors::case_71_no_cluster_leader;
    errors::case_79_enterprise_namespaces_and_partitions_are_refused_by_ce;
    go_lock::case_72_lock_refuses_a_key_that_is_not_a_lock;
    go_lock::case_73_lock_retries_through_a_lock_delay;
    go_lock::case_74_monitor_retries;
    go_lock::case_75_unlock_keeps_value_and_flags_and_frees_the_key_at_once;
    leader::case_76_renew_without_a_leader_is_500_no_cluster_leader => Setup::cluster();
    leader::case_77_a_blocking_read_across_a_leader_change => Setup::cluster();
    leader::case_78_a_new_leader_restarts_every_ttl_timer => Setup::cluster();
}
