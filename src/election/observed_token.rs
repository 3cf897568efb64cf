//! The fencing token of a holder that Observe mode mirrors (rule 6).
//!
//! Consul's `LockIndex` counts the acquisitions of one life of a key and starts again at 1
//! when the key is re-created, which applications do: Patroni's leader key goes with the
//! session that held it. Mirrored as it is, the token on the pod and in status would go
//! backwards. The token is therefore the `LockIndex` while that is above the recorded token;
//! otherwise a pod that still carries the leader label with the recorded token keeps it (its
//! tenure goes on), and any other holder gets the recorded token + 1. It only grows for as
//! long as the election's status lives, and no token names two tenures.

/// The token for a holder of the key at `lock_index`, given the status' `recorded` token and
/// whether the holder still carries the leader label with exactly that token (`labelled`).
pub fn observed_token(recorded: Option<u64>, labelled: bool, lock_index: u64) -> u64 {
    match recorded {
        Some(token) if lock_index <= token => {
            if labelled {
                token
            } else {
                token + 1
            }
        }
        _ => lock_index,
    }
}

#[cfg(test)]
mod tests {
    use super::observed_token;

    #[test]
    fn the_lock_index_while_it_is_ahead() {
        assert_eq!(observed_token(None, false, 1), 1);
        assert_eq!(observed_token(Some(3), false, 4), 4);
        assert_eq!(observed_token(Some(3), true, 7), 7);
    }

    #[test]
    fn a_re_created_key_never_takes_the_token_back() {
        // A, B, A held LockIndex 1, 2, 3; the key was re-created and B acquired it (1).
        assert_eq!(observed_token(Some(3), false, 1), 4);
        // A tenure that goes on keeps its token, whatever the new key counts.
        assert_eq!(observed_token(Some(4), true, 1), 4);
        // A new tenure, even of the pod the status names, gets a token of its own.
        assert_eq!(observed_token(Some(4), false, 2), 5);
    }
}
