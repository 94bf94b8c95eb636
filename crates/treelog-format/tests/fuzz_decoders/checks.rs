//! The checks, one per decoder. Each returns normally or fails the case.

use super::*;

/// Fixed-layout codecs: a decoded value re-encodes to the very input.
pub(crate) fn check_keys(b: &[u8]) -> Result<(), TestCaseError> {
    let ((), peak) = measure(|| {
        if let Ok(v) = format::decode_inode_key(b) {
            assert_eq!(format::inode_key(v), b);
        }
        if let Ok(v) = format::decode_log_key(b) {
            assert_eq!(format::log_key(v), b);
        }
        if let Ok(v) = format::decode_edge_value(b) {
            assert_eq!(format::edge_value(v), b);
        }
        if let Ok(v) = format::decode_next_id_value(b) {
            assert_eq!(format::next_id_value(v), b);
        }
        if let Ok(v) = format::decode_u64_be("fuzz", b) {
            assert_eq!(format::encode_u64_be(v), b);
        }
        if let Ok(v) = meta::decode_u64("meta value", b) {
            assert_eq!(meta::encode_u64(v), b);
        }
        if let Ok((p, name)) = format::decode_edge_key(b) {
            assert_eq!(format::edge_key(p, name), b);
        }
    });
    prop_assert!(
        peak <= SLACK + 2 * b.len(),
        "peak {peak} for {} bytes",
        b.len()
    );
    Ok(())
}

pub(crate) fn check_inode_entry(b: &[u8]) -> Result<(), TestCaseError> {
    let ((owned, borrowed), peak) = measure(|| (InodeEntry::decode(b), InodeEntry::decode_ref(b)));
    prop_assert!(peak <= SLACK + b.len(), "peak {peak} for {} bytes", b.len());
    match (owned, borrowed) {
        (Ok(e), Ok(r)) => {
            prop_assert_eq!(e.encode(), b);
            prop_assert_eq!(r.encode(), b);
            prop_assert_eq!(r.name, &e.name[..]);
        }
        (Err(e), Err(r)) => {
            prop_assert_eq!(e.kind(), ErrorKind::Corruption);
            prop_assert_eq!(r.kind(), ErrorKind::Corruption);
        }
        (o, r) => prop_assert!(false, "decode {o:?} but decode_ref {r:?}"),
    }
    Ok(())
}

/// A dictionary holds at most 255 strings of at most 255 bytes, each twice
/// (the list and the reverse index) with its table slot.
pub(crate) const DICT_BOUND: usize = 64 << 10;

pub(crate) fn check_dict(b: &[u8]) -> Result<(), TestCaseError> {
    let (d, peak) = measure(|| Dict::decode(b));
    prop_assert!(
        peak <= DICT_BOUND + 4 * b.len(),
        "peak {peak} for {} bytes",
        b.len()
    );
    match d {
        Ok(d) => prop_assert_eq!(d.encode(), b),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

pub(crate) fn check_record(b: &[u8]) -> Result<(), TestCaseError> {
    let ((owned, borrowed), peak) =
        measure(|| (decode_record(b, None), decode_record_ref(b, None)));
    prop_assert!(
        peak <= message_bound(b.len()),
        "peak {peak} for {} bytes",
        b.len()
    );
    match (owned, borrowed) {
        (Ok(rec), Ok(r)) => {
            // The borrowed form (replay's) reads the same record.
            prop_assert_eq!(rec.borrowed(), r);
            let again = encode_record(&rec).unwrap();
            prop_assert_eq!(decode_record(&again, Some(rec.seq)).unwrap(), rec.clone());
            prop_assert!(decode_record(b, Some(rec.seq.wrapping_add(1))).is_err());
        }
        (Err(e), Err(r)) => {
            prop_assert_eq!(e.kind(), ErrorKind::Corruption);
            prop_assert_eq!(r.kind(), ErrorKind::Corruption);
        }
        (o, r) => prop_assert!(false, "decode_record {o:?} but decode_record_ref {r:?}"),
    }
    Ok(())
}

pub(crate) fn check_cursor_state(b: &[u8]) -> Result<(), TestCaseError> {
    let (st, peak) = measure(|| CursorState::decode("fuzz", b));
    prop_assert!(peak <= SLACK, "peak {peak} for {} bytes", b.len());
    match st {
        Ok(st) => prop_assert_eq!(
            CursorState::decode("fuzz", &st.encode().unwrap()).unwrap(),
            st
        ),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

/// A frame payload: what `decode` accepts encodes and decodes to itself.
pub(crate) fn check_message<T>(b: &[u8]) -> Result<(), TestCaseError>
where
    T: serde::Serialize + for<'a> serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    let (m, peak) = measure(|| protocol::decode::<T>(b));
    prop_assert!(
        peak <= message_bound(b.len()),
        "peak {peak} for {} bytes",
        b.len()
    );
    match m {
        Ok(m) => prop_assert_eq!(protocol::decode::<T>(&payload(&m)).unwrap(), m),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

/// Serves bytes in reads of at most `step` bytes, always ready (so one
/// poll completes a read; no runtime needed).
pub(crate) struct Trickle<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) step: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let data = self.data;
        let n = buf.remaining().min(self.step).min(data.len());
        let (head, tail) = data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// Reads every frame of `stream` as the server and the client do,
/// checking each against what the bytes say, and decodes each payload.
pub(crate) fn check_frames(stream: &[u8], max: usize, step: usize) -> Result<(), TestCaseError> {
    let mut r = Trickle { data: stream, step };
    loop {
        let rest = r.data;
        let (got, peak) = measure(|| {
            protocol::read_frame(&mut r, max)
                .now_or_never()
                .expect("an always-ready reader completes in one poll")
        });
        let consumed = rest.len() - r.data.len();
        if rest.is_empty() {
            prop_assert!(matches!(got, Ok(None)), "{got:?} at the end");
            return Ok(());
        }
        if rest.len() < 4 {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
            return Ok(());
        }
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        if len > max {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::InvalidArgument);
            prop_assert!(peak <= SLACK, "refused {len} > {max} after {peak} bytes");
            return Ok(());
        }
        let arrived = (rest.len() - 4).min(len);
        // The buffer grows with what arrived: doubling, counted with the
        // copy of the old block while it grows.
        let bound = SLACK + FRAME_READ_CHUNK.max(3 * arrived);
        prop_assert!(
            peak <= bound,
            "{len}-byte frame, {arrived} bytes arrived: peak {peak} > {bound}"
        );
        if arrived < len {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
            return Ok(());
        }
        let frame = got.unwrap().unwrap();
        prop_assert_eq!(&frame[..], &rest[4..4 + len]);
        prop_assert_eq!(consumed, 4 + len);
        check_message::<ClientMsg>(&frame)?;
        check_message::<ServerMsg>(&frame)?;
    }
}

/// Byte streams of a few frames each.
pub(crate) fn frame_stream() -> impl Strategy<Value = Vec<u8>> {
    let frame = prop_oneof![
        client_msg().prop_map(|m| protocol::encode(&m).unwrap()),
        server_msg().prop_map(|m| protocol::encode(&m).unwrap()),
    ];
    prop::collection::vec(frame, 1..4).prop_map(|fs| fs.concat())
}

pub(crate) fn frame_limit() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(16),
        Just(64 << 10),
        Just(protocol::DEFAULT_MAX_FRAME),
        Just(256 << 20),
        Just(u32::MAX as usize),
    ]
}

pub(crate) fn read_step() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1), 1usize..64, Just(usize::MAX)]
}
