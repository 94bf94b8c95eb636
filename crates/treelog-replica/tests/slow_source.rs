//! A source slower to answer `BackupBegin` than a request may take: a
//! big source takes a checkpoint and digests its whole index before it
//! answers (minutes at 10^8 inodes), and the fetch that a replica's
//! bootstrap runs must wait for it rather than time out and ask for
//! another backup. The source is slowed by the `backup::serve` delay
//! point, so this binary sets `FAILPOINTS` for its whole process and holds
//! this one test.
#![cfg(feature = "failpoints")]

use std::time::{Duration, Instant};

use treelog_client::{Client, ClientOptions};
use treelog_replica::fetch;
use treelog_testkit::client::connect;
use treelog_testkit::commands::mkdir;
use treelog_testkit_server::server;

/// The client's deadline for every other request.
const DEADLINE: Duration = Duration::from_secs(1);
/// How long the source takes before it starts the backup.
const SLOW: Duration = Duration::from_millis(3000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waits_for_a_source_slower_than_the_request_deadline() {
    // Before the server's first failpoint reads it.
    std::env::set_var(
        "FAILPOINTS",
        format!("backup::serve=sleep({})", SLOW.as_millis()),
    );
    let dir = tempfile::tempdir().unwrap();
    let source = server::start(&dir.path().join("source"), |_| {}).await;
    let c = connect(source.bound.rpc).await;
    for i in 0..50 {
        c.submit(mkdir(&format!("/d{i}"))).await.unwrap();
    }
    let seq = c.ping().await.unwrap();

    let client = Client::connect(source.bound.rpc, ClientOptions::default())
        .await
        .unwrap()
        .with_deadline(DEADLINE);
    let dest = dir.path().join("fetched");
    let started = Instant::now();
    let fetched = fetch::fetch(&client, &dest, 64 << 10, |_| {})
        .await
        .expect("the fetch outwaits the slow source");
    let took = started.elapsed();
    assert!(
        took >= SLOW,
        "the source was not slowed ({took:?}): the test shows nothing"
    );
    assert!(fetched.seq >= seq, "{} < {seq}", fetched.seq);
    // The root and the 50 directories.
    assert_eq!(fetched.inodes, 51);
    assert!(fetched.files > 0 && fetched.bytes > 0);
    assert!(dest.is_dir());
    drop(c);
    source.shutdown().await.unwrap();
}
