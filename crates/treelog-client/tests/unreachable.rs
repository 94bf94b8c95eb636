//! Connecting when no server answers: a dead port, and a socket that
//! accepts but never speaks (a paused process behind its listen queue).
//! Servers that answer are `treelog-server`'s `tests/client_failover.rs`.

use std::time::{Duration, Instant};

use treelog_client::{Client, ClientOptions, Endpoint};
use treelog_proto::error::ErrorKind;

#[tokio::test]
async fn a_silent_listener_is_given_up_on_within_the_connect_bound() {
    // Accepts (the kernel does, into its queue) and never answers.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let t = Instant::now();
    let e = Client::connect(
        addr,
        ClientOptions {
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await
    .err()
    .expect("no handshake");
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("handshake"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The request deadline bounds the connect too.
    let t = Instant::now();
    let e = Client::connect(
        addr,
        ClientOptions {
            request_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await
    .err()
    .expect("no handshake");
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    drop(l);
}

#[tokio::test]
async fn dead_endpoints_fail_the_first_connect_at_once() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let t = Instant::now();
    let e = Client::connect_to(
        &format!("{dead},localhost:{}", dead.port()),
        ClientOptions::default(),
    )
    .await
    .err()
    .expect("nothing listens");
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let e = Client::connect_with(ClientOptions::default())
        .await
        .err()
        .expect("no endpoint");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = Client::connect_to("a:1,[::1]", ClientOptions::default())
        .await
        .err()
        .expect("no port");
    assert!(e.to_string().contains("\"[::1]\""), "{e}");
    assert_eq!(Endpoint::parse_list("a:1,b:2").unwrap().len(), 2);
}
