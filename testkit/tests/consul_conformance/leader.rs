//! Cases 76-78: a change of the Raft leader.
