//! Free loopback TCP ports, picked at runtime (never fixed: test binaries and engineers share
//! the machine).

use std::collections::BTreeSet;
use std::net::TcpListener;

use super::error::ClusterError;

/// `N` distinct ports that were free a moment ago. Another process may still take one before
/// our child binds it; the cluster start retries on "address already in use".
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], ClusterError> {
    // All listeners stay open until every port is picked, so the ports are distinct.
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ClusterError::io("binding a loopback port"))?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(ClusterError::io("reading a bound port"))?
            .port();
    }
    Ok(ports)
}

/// The first port after the range the kernel hands out for outgoing connections and for
/// `bind(0)` (Linux's default `ip_local_port_range` starts at 32768).
const EPHEMERAL_START: u16 = 32768;
/// The lowest port [`stable_ports`] picks.
const STABLE_START: u16 = 10000;

/// The ports [`stable_ports`] handed out in this process: a member that was killed leaves its
/// ports free until it restarts, and another cluster of the same test binary starting
/// meanwhile must not take them. Never released: a test run starts a few hundred clusters at
/// most, far fewer than the range holds.
static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());

/// `count` distinct loopback ports, free for TCP and UDP a moment ago, below the ephemeral
/// range, and never handed out before in this process: for processes that are killed and
/// started again on the same ports (Consul members), which an outgoing connection of any
/// process, or another cluster of this one, could otherwise take while they are down. The
/// search starts at a point that differs between processes and runs.
pub(crate) fn stable_ports(count: usize) -> Result<Vec<u16>, ClusterError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = nanos ^ std::process::id().wrapping_mul(2_654_435_761);
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ports = pick_from(start, count, &handed_out)?;
    handed_out.extend(ports.iter().copied());
    Ok(ports)
}

/// [`stable_ports`] searching from `start`, skipping the ports in `taken`.
fn pick_from(start: u32, count: usize, taken: &BTreeSet<u16>) -> Result<Vec<u16>, ClusterError> {
    let span = u32::from(EPHEMERAL_START - STABLE_START);
    let start = start % span;
    // Every socket stays open until all ports are picked, so the ports are distinct.
    let mut held = Vec::with_capacity(count);
    let mut ports = Vec::with_capacity(count);
    for offset in 0..span {
        if ports.len() == count {
            break;
        }
        let Ok(port) = u16::try_from(u32::from(STABLE_START) + (start + offset) % span) else {
            continue;
        };
        if taken.contains(&port) {
            continue;
        }
        let tcp = TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if let (Ok(tcp), Ok(udp)) = (tcp, udp) {
            held.push((tcp, udp));
            ports.push(port);
        }
    }
    if ports.len() < count {
        return Err(ClusterError::io(
            "finding free loopback ports below the ephemeral range",
        )(std::io::Error::other(format!(
            "only {} of {count} free",
            ports.len()
        ))));
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = stable_ports(5).expect("ports");
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), 5);
        assert!(
            ports
                .iter()
                .all(|p| (STABLE_START..EPHEMERAL_START).contains(p))
        );
    }

    #[test]
    fn ports_handed_out_stay_reserved_after_their_sockets_close() {
        // A killed member's ports are free again, yet a search from the same point skips them.
        let first = pick_from(12_345, 5, &BTreeSet::new()).expect("ports");
        let taken: BTreeSet<u16> = first.iter().copied().collect();
        let second = pick_from(12_345, 5, &taken).expect("ports");
        assert!(
            second.iter().all(|p| !taken.contains(p)),
            "{first:?} then {second:?}"
        );
        let a = stable_ports(5).expect("ports");
        let b = stable_ports(5).expect("ports");
        assert!(a.iter().all(|p| !b.contains(p)), "{a:?} and {b:?}");
    }
}
