//! The bridge's stream read back as a consumer reads it (docs/BRIDGE.md),
//! and checked against the log.

use std::time::Duration;

use async_nats::jetstream;
use treelog_client::Client;
use treelog_proto::stream::{Filter, StartFrom, StreamItem, SubscribeOptions};

/// The header of a message naming its record's sequence (docs/BRIDGE.md).
pub const SEQ: &str = "Treelog-Seq";
/// The header of a record's part, `i/n` (1-based), when the record was
/// cut into `n` parts; absent otherwise (docs/BRIDGE.md).
pub const PART: &str = "Treelog-Part";

/// The servers of `urls` (comma separated, as the bridge takes them).
fn server_addrs(urls: &str) -> Vec<async_nats::ServerAddr> {
    let addrs: Vec<async_nats::ServerAddr> = urls
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| u.parse().unwrap_or_else(|e| panic!("NATS URL {u:?}: {e}")))
        .collect();
    assert!(!addrs.is_empty(), "no NATS URL given");
    addrs
}

/// A JetStream context on `url`, retrying while the server starts.
pub async fn jetstream(url: &str) -> jetstream::Context {
    let mut last = String::new();
    for _ in 0..200 {
        match async_nats::connect(server_addrs(url)).await {
            Ok(c) => return jetstream::new(c),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cannot connect to {url}: {last}");
}

/// The stream's messages, in stream order, read one by one (retrying
/// while the stream is unavailable, as during a cluster's election).
pub async fn stream_messages(
    url: &str,
    stream: &str,
) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let js = jetstream(url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (st, last) = loop {
        match js.get_stream(stream).await {
            Ok(mut st) => match st.info().await {
                Ok(info) => {
                    let last = info.state.last_sequence;
                    break (st, last);
                }
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "stream info: {e}"),
            },
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "get stream: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut out = Vec::new();
    for seq in 1..=last {
        let m = loop {
            match st.get_raw_message(seq).await {
                Ok(m) => break m,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < deadline, "message {seq}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        out.push(m);
    }
    out
}

/// The Treelog-Seq of the stream's last message (0 when empty), retrying
/// while unavailable.
pub async fn last_published(url: &str, stream: &str) -> u64 {
    let js = jetstream(url).await;
    let Ok(mut st) = js.get_stream(stream).await else {
        return 0;
    };
    let subject = match st.info().await {
        Ok(i) => i.config.subjects[0].clone(),
        Err(_) => return 0,
    };
    let Ok(m) = st.get_last_raw_message_by_subject(&subject).await else {
        return 0;
    };
    let seq: u64 = m.headers.get(SEQ).unwrap().as_str().parse().unwrap();
    let whole = m
        .headers
        .get(PART)
        .map(|p| {
            let (a, b) = p.as_str().split_once('/').unwrap();
            a == b
        })
        .unwrap_or(true);
    if whole {
        seq
    } else {
        seq - 1
    }
}

/// Waits until the stream holds every record up to `seq`.
pub async fn wait_published(url: &str, stream: &str, seq: u64, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let last = last_published(url, stream).await;
        if last >= seq {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never reached record {seq} (it holds up to {last})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks that `stream` holds the records `first..=last` of the server's
/// log exactly once, in order: parts in order and complete, each record's
/// reassembled payload equal to its `tail --json` line (for the records
/// still in the log), de-duplication ids unique. Returns how many messages
/// were split parts.
pub async fn check_stream(
    url: &str,
    stream: &str,
    client: &Client,
    first: u64,
    last: u64,
) -> usize {
    let msgs = stream_messages(url, stream).await;
    let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut parts_seen = 0;
    let mut open: Option<(u64, u32, u32, Vec<u8>)> = None;
    for m in &msgs {
        let h = |k: &str| m.headers.get(k).map(|v| v.as_str().to_owned());
        let id = m
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .unwrap_or_else(|| panic!("no message id in {:?}", m.headers))
            .to_string();
        assert!(ids.insert(id.clone()), "message id {id} twice");
        let seq: u64 = h(SEQ).unwrap().parse().unwrap();
        let (part, parts) = match h(PART) {
            None => (1, 1),
            Some(p) => {
                parts_seen += 1;
                let (a, b) = p.split_once('/').unwrap();
                (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())
            }
        };
        match open.take() {
            None => {
                assert_eq!(part, 1, "record {seq} starts at part {part}");
                open = Some((seq, part, parts, m.payload.to_vec()));
            }
            Some((s, p, n, mut buf)) => {
                assert_eq!(
                    (seq, part, parts),
                    (s, p + 1, n),
                    "a record's parts out of order"
                );
                buf.extend_from_slice(&m.payload);
                open = Some((s, part, n, buf));
            }
        }
        if let Some((s, p, n, _)) = &open {
            if p == n {
                let (s, _, _, buf) = open.take().unwrap();
                records.push((s, buf));
            } else {
                let _ = s;
            }
        }
    }
    assert!(open.is_none(), "the stream ends inside a record");
    let seqs: Vec<u64> = records.iter().map(|r| r.0).collect();
    let want: Vec<u64> = (first..=last).collect();
    if seqs != want {
        let dup = seqs.windows(2).find(|w| w[1] <= w[0]);
        let gap = seqs.windows(2).find(|w| w[1] > w[0] + 1);
        panic!(
            "the stream holds {} records {:?}..{:?}, want {first}..={last} (first duplicate or \
             disorder: {dup:?}, first gap: {gap:?})",
            seqs.len(),
            seqs.first(),
            seqs.last()
        );
    }
    // Byte for byte, the log as a subscriber receives it.
    let log_start = client.info().await.unwrap().1;
    records.retain(|r| r.0 >= log_start);
    let mut sub = client
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(first.max(log_start)),
            filter: Filter::default(),
            cursor: None,
            resync_on_move_in: None,
        })
        .await
        .unwrap();
    let mut i = 0;
    while i < records.len() {
        let item = sub.next().await.expect("stream ended").unwrap();
        if let StreamItem::Record { seq, .. } = &item {
            assert_eq!(*seq, records[i].0);
            let want = serde_json::to_vec(&item).unwrap();
            assert!(
                want == records[i].1,
                "record {seq}: the stream's payload differs from the log's"
            );
            i += 1;
        }
    }
    parts_seen
}
