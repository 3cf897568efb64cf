//! What a reconcile observes for the core, before it decides and acts: the facts the
//! election's machine asks for, read from the caches of the API server's objects
//! ([`crate::cache`]) and from the Consul observers ([`crate::observers`]). Reads only: nothing
//! here writes, and nothing here decides what the facts mean.

pub mod admission;
pub mod plan_loop;
pub mod shared;
pub mod withdrawal;
