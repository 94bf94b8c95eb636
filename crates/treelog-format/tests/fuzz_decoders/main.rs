//! Fuzzing of every decoder of bytes that come from disk or the network, on
//! stable Rust with proptest: the key and value codecs of the column
//! families (`format::*`), log record envelopes, durable cursor states, and
//! the wire protocol (frames, the handshake, requests and responses).
//!
//! Each decoder gets arbitrary bytes and mutated valid encodings (taken from
//! the real encoder, then bits flipped, bytes set, inserted, deleted,
//! duplicated, truncated, two encodings spliced, length fields set to huge
//! values). A decoder must return an error and never panic (a panic fails
//! the case); when it accepts mutated input, what it returns must encode
//! and decode back to itself (or to the very input, for the fixed layouts).
//! A counting allocator checks that no input makes a decoder allocate
//! beyond its bound, in particular that a frame's length prefix commits no
//! memory the payload has not brought.
//!
//! Short mode by default (a few seconds in a debug build). The long mode
//! runs N cases per property: `TREELOG_FUZZ_CASES=1000000 cargo test
//! --release -p treelog-format --test fuzz_decoders` (docs/OPERATIONS.md,
//! "Decoder fuzzing").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use proptest::prelude::*;
use proptest::sample::Index;
use tokio::io::{AsyncRead, ReadBuf};

use treelog_format as format;
use treelog_format::record::{
    decode_record, decode_record_ref, encode_record, ENVELOPE_HEADER_LEN,
};
use treelog_format::{meta, Dict, InodeEntry};
use treelog_proto::command::Command;
use treelog_proto::cursor::{CursorInfo, CursorState};
use treelog_proto::error::{DictKind, ErrorKind};
use treelog_proto::event::EventKind;
use treelog_proto::event::{Event, Record, Update};
use treelog_proto::protocol::{
    self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg, FRAME_READ_CHUNK,
};
use treelog_proto::read::ReadAt;
use treelog_proto::stream::{Filter, Scope, ScopedEvent, StartFrom, StreamItem, SubscribeOptions};
use treelog_proto::types::{
    Attrs, Bytes, DirEntry, FileType, Inode, ListPage, Quota, Usage, XattrFlag,
};

mod checks;
mod inputs;
mod peak_alloc;
mod values;

use checks::*;
use inputs::*;
use peak_alloc::*;
use values::*;

// ---------------------------------------------------------------------------
// Case counts.

/// Cases per property in the default (CI) mode.
const SHORT_CASES: u32 = 1_000;

fn config() -> ProptestConfig {
    let cases = match std::env::var("TREELOG_FUZZ_CASES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("TREELOG_FUZZ_CASES={v:?} is not a number")),
        Err(_) => SHORT_CASES,
    };
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(config())]

    #[test]
    fn keys_arbitrary(b in bytes(24)) {
        check_keys(&b)?;
    }

    #[test]
    fn keys_mutated(b in mutated(prop_oneof![
        any::<u64>().prop_map(|v| format::inode_key(v).to_vec()),
        any::<u64>().prop_map(|v| format::next_id_value(v).to_vec()),
        (any::<u64>(), text()).prop_map(|(p, n)| format::edge_key(p, n.as_bytes())),
    ])) {
        check_keys(&b)?;
    }

    #[test]
    fn inode_entry_arbitrary(b in bytes(120)) {
        check_inode_entry(&b)?;
    }

    #[test]
    fn inode_entry_mutated(b in mutated(inode_entry().prop_map(|e| e.encode()))) {
        check_inode_entry(&b)?;
    }

    #[test]
    fn dict_arbitrary(b in bytes(200)) {
        check_dict(&b)?;
    }

    #[test]
    fn dict_mutated(b in mutated(dict().prop_map(|d| d.encode()))) {
        check_dict(&b)?;
    }

    #[test]
    fn record_arbitrary(b in bytes(300)) {
        check_record(&b)?;
    }

    #[test]
    fn record_arbitrary_payload_sealed(p in bytes(300)) {
        check_record(&seal(&[1, 1], &p))?;
    }

    #[test]
    fn record_mutated(b in mutated(record().prop_map(|r| encode_record(&r).unwrap()))) {
        check_record(&b)?;
    }

    #[test]
    fn record_mutated_payload_sealed(b in resealed_record()) {
        check_record(&b)?;
    }

    #[test]
    fn cursor_state_arbitrary(b in bytes(40)) {
        check_cursor_state(&b)?;
    }

    #[test]
    fn cursor_state_mutated(b in mutated(cursor_state().prop_map(|s| s.encode().unwrap()))) {
        check_cursor_state(&b)?;
    }

    /// Requests, and the handshake's `Hello` (a `ClientMsg` too).
    #[test]
    fn client_msg_arbitrary(b in bytes(200)) {
        check_message::<ClientMsg>(&b)?;
    }

    #[test]
    fn client_msg_mutated(b in mutated(client_msg().prop_map(|m| payload(&m)))) {
        check_message::<ClientMsg>(&b)?;
    }

    #[test]
    fn hello_mutated(b in mutated(hello().prop_map(|h| payload(&ClientMsg::Hello(h))))) {
        check_message::<ClientMsg>(&b)?;
    }

    /// Responses, and the handshake's `Welcome`/`Fatal`.
    #[test]
    fn server_msg_arbitrary(b in bytes(200)) {
        check_message::<ServerMsg>(&b)?;
    }

    #[test]
    fn server_msg_mutated(b in mutated(server_msg().prop_map(|m| payload(&m)))) {
        check_message::<ServerMsg>(&b)?;
    }

    #[test]
    fn frames_arbitrary(b in bytes(64), max in frame_limit(), step in read_step()) {
        check_frames(&b, max, step)?;
    }

    #[test]
    fn frames_mutated(b in mutated(frame_stream()), max in frame_limit(), step in read_step()) {
        check_frames(&b, max, step)?;
    }
}

// ---------------------------------------------------------------------------
// Fixed cases.

/// The counter sees what is allocated, so the bounds above can fail.
#[test]
fn the_allocation_counter_sees_allocations() {
    let (v, peak) = measure(|| vec![7u8; 1 << 20]);
    assert_eq!(v.len(), 1 << 20);
    assert!(peak >= 1 << 20, "peak {peak}");
    let ((), peak) = measure(|| drop(vec![0u8; 3 << 20]));
    assert!(peak >= 3 << 20, "peak {peak}");
}

/// A length prefix within a 256 MiB limit followed by a few bytes must not
/// make the reader allocate what it announces.
#[test]
fn a_huge_length_prefix_with_a_few_bytes_allocates_one_chunk() {
    for len in [200u32 << 20, (256 << 20) - 1, 1 << 28] {
        let mut stream = len.to_be_bytes().to_vec();
        stream.extend_from_slice(b"a few payload bytes");
        let mut r = Trickle {
            data: &stream,
            step: usize::MAX,
        };
        let (got, peak) = measure(|| {
            protocol::read_frame(&mut r, 256 << 20)
                .now_or_never()
                .unwrap()
        });
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
        assert!(
            peak <= FRAME_READ_CHUNK + SLACK,
            "{len}-byte prefix: peak {peak}"
        );
    }
}

/// A length above the limit is refused before any payload buffer exists.
#[test]
fn a_length_prefix_over_the_limit_allocates_nothing_but_the_error() {
    let stream = u32::MAX.to_be_bytes();
    let mut r = Trickle {
        data: &stream,
        step: usize::MAX,
    };
    let (got, peak) = measure(|| {
        protocol::read_frame(&mut r, protocol::DEFAULT_MAX_FRAME)
            .now_or_never()
            .unwrap()
    });
    assert_eq!(got.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert!(peak <= SLACK, "peak {peak}");
}

/// A whole frame near the limit is read whole, in memory proportional to it.
#[test]
fn a_full_frame_is_read_in_memory_proportional_to_it() {
    let len = protocol::DEFAULT_MAX_FRAME;
    let mut stream = (len as u32).to_be_bytes().to_vec();
    stream.extend((0..len).map(|i| (i % 253) as u8));
    let mut r = Trickle {
        data: &stream,
        step: 1500,
    };
    let (got, peak) = measure(|| protocol::read_frame(&mut r, len).now_or_never().unwrap());
    assert!(got.unwrap().unwrap()[..] == stream[4..]);
    assert!(peak <= 3 * len, "peak {peak}");
}

/// Sequence lengths announced far beyond the input are refused without
/// preallocating them: a record claiming 2^32 events in a few bytes.
#[test]
fn a_huge_sequence_length_in_a_small_record_is_refused_cheaply() {
    let mut payload = vec![1, 1]; // seq 1, time 1
    payload.extend(varint(u32::MAX as u64));
    payload.extend([0u8; 16]);
    let b = seal(&[1, 1], &payload);
    let (got, peak) = measure(|| decode_record(&b, None));
    assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
    assert!(peak <= SLACK, "peak {peak}");
}

/// Messages of a full default frame made of the smallest elements (where
/// memory per input byte is highest) stay within the per-byte bound.
#[test]
fn full_frames_of_tiny_elements_stay_within_the_message_bound() {
    // The default: no size, times or mode, empty owner and group.
    let tiny_attrs = Attrs::default;
    let tiny_event = || Event::Create {
        id: 0,
        parent: 0,
        name: String::new().into(),
        path: String::new().into(),
        attrs: tiny_attrs(),
        parent_mtime_ms: None,
        quotas: Vec::new(),
    };
    let tiny_inode = || Inode {
        id: 0,
        parent: 0,
        name: String::new().into(),
        attrs: tiny_attrs(),
    };
    let n = protocol::DEFAULT_MAX_FRAME / 16;
    let msgs = [
        ServerMsg::Response {
            id: 1,
            body: ResponseBody::Page(ListPage {
                entries: (0..n)
                    .map(|_| DirEntry {
                        name: String::new().into(),
                        inode: tiny_inode(),
                    })
                    .collect(),
                next_start_after: None,
            }),
        },
        ServerMsg::Response {
            id: 1,
            body: ResponseBody::Item(StreamItem::Record {
                seq: 1,
                time_ms: 1,
                events: (0..n)
                    .map(|_| ScopedEvent {
                        scope: Scope::Inside,
                        event: Arc::new(tiny_event()),
                    })
                    .collect(),
            }),
        },
    ];
    for m in msgs {
        let b = payload(&m);
        let (got, peak) = measure(|| protocol::decode::<ServerMsg>(&b));
        assert!(got.unwrap() == m);
        assert!(
            peak <= message_bound(b.len()),
            "{} bytes: peak {peak}",
            b.len()
        );
    }
    let rec = Record {
        seq: 1,
        time_ms: 1,
        events: (0..n).map(|_| tiny_event()).collect(),
    };
    let b = encode_record(&rec).unwrap();
    let (owned, peak) = measure(|| decode_record(&b, None));
    assert!(owned.unwrap() == rec);
    assert!(
        peak <= message_bound(b.len()),
        "{} bytes: peak {peak}",
        b.len()
    );
    let (borrowed, peak) = measure(|| decode_record_ref(&b, None));
    assert_eq!(borrowed.unwrap().events.len(), n);
    assert!(
        peak <= message_bound(b.len()),
        "{} bytes: peak {peak}",
        b.len()
    );
}
