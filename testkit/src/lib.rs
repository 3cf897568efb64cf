//! Test infrastructure for consul-elector.
