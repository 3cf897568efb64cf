//! Free loopback TCP ports, picked at runtime (never fixed: test binaries and engineers share
//! the machine).

use std::net::TcpListener;

use super::ClusterError;

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
