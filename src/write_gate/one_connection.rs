//! A test server for the write gate's "paused after the hand-over" tests: it answers the first
//! request of one connection and reports what arrives after it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Listens on loopback; the task answers the first request of the first connection with
/// `201 Created` and an empty JSON object, then returns what arrives on that connection
/// until it closes or a whole request head arrived (empty: nothing was sent).
pub async fn serve() -> (SocketAddr, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listen");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("a connection");
        read_request(&mut socket).await;
        socket
            .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .expect("answer");
        let mut after = Vec::new();
        let mut chunk = [0_u8; 4096];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(30), socket.read(&mut chunk))
                .await
                .expect("the connection closes or a request arrives within 30 s")
                .unwrap_or(0);
            after.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&after).into_owned();
            if read == 0 || text.contains("\r\n\r\n") {
                return text;
            }
        }
    });
    (address, server)
}

/// Reads one request (its head, and a `content-length` or chunked body) from `socket`.
pub async fn read_request(socket: &mut TcpStream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        let read = socket.read(&mut chunk).await.expect("read the request");
        assert_ne!(read, 0, "the connection closed mid-request");
        request.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
        if let Some(head_end) = text.find("\r\n\r\n") {
            if text.contains("transfer-encoding: chunked") {
                if text.ends_with("\r\n0\r\n\r\n") {
                    return request;
                }
                continue;
            }
            let length = text
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |length| length.trim().parse().expect("a length"));
            if request.len() >= head_end + 4 + length {
                return request;
            }
        }
    }
}
