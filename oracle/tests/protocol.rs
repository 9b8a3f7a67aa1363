//! Garbage, truncated frames, oversized frames and unknown versions on the port: that
//! connection is closed, and the server keeps serving everyone else.

use oracle::proto::{self, GetRequest};
use oracle::{ClientConfig, OracleClient, ServerConfig, ServerHandle};
use percolator::kv::MemoryKv;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `bytes` (then half-closes if `eof`), and returns everything the server sent
/// before closing the connection.
async fn send(addr: std::net::SocketAddr, bytes: &[u8], eof: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    if eof {
        s.shutdown().await.unwrap();
    }
    let mut got = Vec::new();
    // A hang guard only: the server must close the connection on its own.
    tokio::time::timeout(Duration::from_secs(20), async {
        let mut chunk = [0u8; 256];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("the server did not close the connection");
    got
}

fn hello_then(frame: &[u8]) -> Vec<u8> {
    let mut out = proto::hello(proto::VERSION).to_vec();
    out.extend_from_slice(frame);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_that_connection() {
    let config = ServerConfig {
        exclusive: true,
        ..ServerConfig::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = ServerHandle::start(config, Arc::new(MemoryKv::new()), listener).unwrap();
    let addr = server.local_addr();
    let client = OracleClient::new(vec![addr.to_string()], ClientConfig::default()).unwrap();
    let mut prev = client.get_timestamp().await.unwrap();

    let mut good = Vec::new();
    proto::encode_request(
        GetRequest {
            req_id: 9,
            count: 2,
        },
        &mut good,
    );
    let mut zero = Vec::new();
    proto::encode_request(
        GetRequest {
            req_id: 9,
            count: 0,
        },
        &mut zero,
    );
    let mut unknown_kind = good.clone();
    unknown_kind[4] = 0x7f;
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            false,
        ),
        ("unknown version", proto::hello(99).to_vec(), false),
        ("truncated handshake", b"PTS".to_vec(), true),
        ("truncated frame", hello_then(&good[..7]), true),
        (
            "oversized frame",
            hello_then(&[0xff, 0xff, 0xff, 0xff, 1]),
            false,
        ),
        ("empty frame", hello_then(&[0, 0, 0, 0]), false),
        ("unknown kind", hello_then(&unknown_kind), false),
        ("zero count", hello_then(&zero), false),
        (
            "good then garbage",
            hello_then(&[good.as_slice(), b"garbage!"].concat()),
            false,
        ),
    ];
    for (name, bytes, eof) in cases {
        let got = send(addr, &bytes, eof).await;
        match name {
            // A client of another version learns ours from the server's hello.
            "unknown version" => assert_eq!(got, proto::hello(proto::VERSION), "{name}"),
            "garbage" | "truncated handshake" => assert!(got.is_empty(), "{name}: {got:?}"),
            "good then garbage" => {
                // The good request is answered before the garbage is found.
                let (reply, _) = proto::decode_reply(&got[proto::HELLO_LEN..])
                    .unwrap()
                    .unwrap();
                assert!(
                    matches!(reply, proto::Reply::Timestamps { count: 2, .. }),
                    "{reply:?}"
                );
            }
            _ => assert_eq!(got, proto::hello(proto::VERSION), "{name}"),
        }
        // Everyone else is still served.
        let ts = client.get_timestamp().await.unwrap();
        assert!(ts > prev, "{name}");
        prev = ts;
    }
    server.shutdown().await;
}
