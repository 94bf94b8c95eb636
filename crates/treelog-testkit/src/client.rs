//! Clients of a server (one in the process or a real binary's) and what
//! they receive.

use std::net::SocketAddr;

use treelog_client::{Client, ClientOptions, RemoteSubscription};
use treelog_proto::stream::StreamItem;

/// A client of the server at `addr`, with the default options.
pub async fn connect(addr: SocketAddr) -> Client {
    Client::connect(addr, ClientOptions::default())
        .await
        .expect("connect a client")
}

/// The sequences of the next `n` records `sub` delivers (its other items
/// skipped).
pub async fn next_records(sub: &mut RemoteSubscription, n: usize) -> Vec<u64> {
    let mut seqs = Vec::with_capacity(n);
    while seqs.len() < n {
        let item = sub.next().await.expect("the subscription ended");
        if let StreamItem::Record { seq, .. } = item.expect("a stream item") {
            seqs.push(seq);
        }
    }
    seqs
}
