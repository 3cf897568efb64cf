//! A loopback TCP proxy in front of a Consul member's HTTP port that a test can partition:
//! while partitioned, every connection (open or new) is held open without a byte passing, the
//! way a dropped network path looks to a client (no refusal, no reset, only silence).

use std::sync::Arc;

use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::RealConsulError;

/// The proxy; its accept loop and connections stop when it is dropped.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    partitioned: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Result<Self, RealConsulError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(RealConsulError::io("binding the consul proxy"))?;
        let port = listener
            .local_addr()
            .map_err(RealConsulError::io("reading the proxy's port"))?
            .port();
        let partitioned = Arc::new(watch::Sender::new(false));
        let state = Arc::clone(&partitioned);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, state.subscribe()));
            }
        });
        Ok(Self {
            port,
            partitioned,
            accept,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Holds every connection silent until [`Proxy::heal`].
    pub fn partition(&self) {
        self.partitioned.send_replace(true);
    }

    /// Closes the held connections and lets new ones through.
    pub fn heal(&self) {
        self.partitioned.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Held connections end with the partition.
        self.partitioned.send_replace(false);
    }
}

/// One connection: forwarded while the proxy passes; on a partition the upstream side is
/// dropped and the client held silent until the partition ends, then closed.
async fn forward(mut client: TcpStream, upstream: u16, mut partitioned: watch::Receiver<bool>) {
    if !*partitioned.borrow_and_update() {
        let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
            // The member is down: the client sees the connection close, as with no listener.
            return;
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = partitioned.wait_for(|cut| *cut) => {}
        }
    }
    // Partitioned: say nothing until healed (or the proxy is gone), then close.
    let _ = partitioned.wait_for(|cut| !*cut).await;
    let _ = client.shutdown().await;
}
