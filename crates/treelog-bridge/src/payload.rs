//! What the bridge puts on the bus: a record's payload, its split into
//! parts below the bus's message size, and the headers that name it
//! (docs/BRIDGE.md §3 is the reference, with golden vectors).
//!
//! The payload is a record as `treelog tail --json` prints it (the
//! `Record` item of a change stream, docs/STREAMS.md §2, every event with
//! scope `Inside`), so that one decoder reads both `tail --json` lines and
//! bus messages; `docs/stream-item.schema.json` is its JSON Schema. Rust
//! consumers may ask for postcard instead (the same item, postcard-encoded).

use std::fmt;

use treelog_proto::event::EVENT_SCHEMA_VERSION;
use treelog_proto::stream::StreamItem;

/// The treelog sequence of the record a message carries.
pub const SEQ: &str = "Treelog-Seq";
/// `i/n` when the record was split into `n` parts (1-based), absent when
/// the message holds the whole record.
pub const PART: &str = "Treelog-Part";
/// The namespace id the record comes from (`treelog admin status`).
pub const NAMESPACE: &str = "Treelog-Namespace";
/// The record's commit time, milliseconds since the Unix epoch.
pub const TIME_MS: &str = "Treelog-Time-Ms";
/// `json` or `postcard`.
pub const ENCODING: &str = "Treelog-Encoding";
/// The event schema version (docs/EVENTS.md §8) of the payload.
pub const SCHEMA: &str = "Treelog-Schema";

/// How a record is encoded in the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// serde_json of the `Record` stream item (`treelog tail --json`).
    #[default]
    Json,
    /// postcard of the same item (`treelog_proto::stream::StreamItem`).
    Postcard,
}

impl Encoding {
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Postcard => "postcard",
        }
    }

    pub fn parse(s: &str) -> Option<Encoding> {
        match s {
            "json" => Some(Encoding::Json),
            "postcard" => Some(Encoding::Postcard),
            _ => None,
        }
    }

    /// Encodes a `Record` item.
    pub fn encode(self, item: &StreamItem) -> Result<Vec<u8>, String> {
        debug_assert!(matches!(item, StreamItem::Record { .. }));
        match self {
            Encoding::Json => serde_json::to_vec(item).map_err(|e| e.to_string()),
            Encoding::Postcard => postcard::to_allocvec(item).map_err(|e| e.to_string()),
        }
    }

    /// Decodes a (reassembled) payload.
    pub fn decode(self, payload: &[u8]) -> Result<StreamItem, String> {
        match self {
            Encoding::Json => serde_json::from_slice(payload).map_err(|e| e.to_string()),
            Encoding::Postcard => postcard::from_bytes(payload).map_err(|e| e.to_string()),
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One message of a record: the whole record, or part `part` of `parts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub seq: u64,
    pub time_ms: u64,
    /// 1-based; `part == parts == 1` for a record that was not split.
    pub part: u32,
    pub parts: u32,
    /// How the payload (of the whole record) is encoded.
    pub encoding: Encoding,
    pub payload: bytes::Bytes,
}

impl Message {
    /// The bus's de-duplication id: `<namespace>:<seq>` for a whole
    /// record, `<namespace>:<seq>:<part>` for a part.
    pub fn id(&self, namespace: &str) -> String {
        if self.parts == 1 {
            format!("{namespace}:{}", self.seq)
        } else {
            format!("{namespace}:{}:{}", self.seq, self.part)
        }
    }

    /// The headers every message carries (the bus adds its own).
    pub fn headers(&self, namespace: &str) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (SEQ, self.seq.to_string()),
            (NAMESPACE, namespace.to_owned()),
            (TIME_MS, self.time_ms.to_string()),
            (ENCODING, self.encoding.name().to_owned()),
            (SCHEMA, EVENT_SCHEMA_VERSION.to_string()),
        ];
        if self.parts > 1 {
            h.push((PART, format!("{}/{}", self.part, self.parts)));
        }
        h
    }

    /// Whether this message ends its record.
    pub fn is_last(&self) -> bool {
        self.part == self.parts
    }
}

/// Splits a record's payload into messages of at most `max` bytes each
/// (every part full but the last, so the split is a function of the
/// payload and `max`, and a resumed bridge splits a record as before when
/// it knows `max` from the first part's length).
pub fn split(
    seq: u64,
    time_ms: u64,
    encoding: Encoding,
    payload: Vec<u8>,
    max: usize,
) -> Vec<Message> {
    assert!(max > 0, "a message must hold at least one byte");
    let payload = bytes::Bytes::from(payload);
    if payload.len() <= max {
        return vec![Message {
            seq,
            time_ms,
            part: 1,
            parts: 1,
            encoding,
            payload,
        }];
    }
    let parts = payload.len().div_ceil(max);
    let parts_u32 = u32::try_from(parts).unwrap_or(u32::MAX);
    (0..parts)
        .map(|i| Message {
            seq,
            time_ms,
            part: i as u32 + 1,
            parts: parts_u32,
            encoding,
            payload: payload.slice(i * max..((i + 1) * max).min(payload.len())),
        })
        .collect()
}

/// What the last message in the bus says about where the bridge stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub seq: u64,
    pub part: u32,
    pub parts: u32,
    /// The payload length of that message: when the record is not
    /// complete, the size its parts were cut at.
    pub len: usize,
}

impl Mark {
    /// Where to go on: `(seq, parts already published of it)`.
    pub fn resume(&self) -> (u64, u32) {
        if self.part < self.parts {
            (self.seq, self.part)
        } else {
            (self.seq + 1, 0)
        }
    }
}

/// Reads a message's treelog headers back (for the last message in the
/// bus). `get` returns a header's value. Errors name what is wrong: a
/// message without them was not published by a bridge.
pub fn parse_mark(
    get: impl Fn(&str) -> Option<String>,
    len: usize,
    namespace: &str,
) -> Result<Mark, String> {
    let seq = get(SEQ).ok_or_else(|| {
        format!("the message has no {SEQ} header: not published by a treelog bridge")
    })?;
    let seq: u64 = seq
        .parse()
        .map_err(|_| format!("{SEQ} header {seq:?} is not a sequence number"))?;
    match get(NAMESPACE) {
        Some(ns) if ns == namespace => {}
        Some(ns) => {
            return Err(format!(
                "the stream holds records of namespace {ns}, not of this server's {namespace}: \
                 give each namespace its own stream"
            ))
        }
        None => return Err(format!("the message has no {NAMESPACE} header")),
    }
    let (part, parts) = match get(PART) {
        None => (1, 1),
        Some(p) => {
            let parsed = p
                .split_once('/')
                .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
                .filter(|&(a, b)| a >= 1 && a <= b);
            parsed.ok_or_else(|| format!("{PART} header {p:?} is not i/n"))?
        }
    };
    Ok(Mark {
        seq,
        part,
        parts,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use treelog_proto::event::Event;
    use treelog_proto::stream::{Scope, ScopedEvent};
    use treelog_proto::types::{Attrs, FileType};

    fn record() -> StreamItem {
        let attrs = Attrs {
            kind: FileType::Directory,
            size: 0,
            block_size: 0,
            ctime_ms: 1_700_000_000_000,
            mtime_ms: 1_700_000_000_000,
            change_ms: 1_700_000_000_000,
            mode: 0o755,
            complete: true,
            owner: "alice".into(),
            group: "staff".into(),
        };
        StreamItem::Record {
            seq: 1,
            time_ms: 1_700_000_000_000,
            events: Arc::from(vec![ScopedEvent {
                scope: Scope::Inside,
                event: Arc::new(Event::Create {
                    id: 2,
                    parent: 1,
                    name: "data".into(),
                    path: "/data".into(),
                    attrs,
                    parent_mtime_ms: Some(1_700_000_000_000),
                    quotas: vec![],
                }),
            }]),
        }
    }

    /// The golden vector of docs/BRIDGE.md §3.
    #[test]
    fn json_payload_is_the_tail_json_line() {
        let got = String::from_utf8(Encoding::Json.encode(&record()).unwrap()).unwrap();
        assert_eq!(
            got,
            r#"{"Record":{"seq":1,"time_ms":1700000000000,"events":[{"scope":"Inside","event":{"Create":{"id":2,"parent":1,"name":"data","path":"/data","attrs":{"kind":"Directory","size":0,"block_size":0,"ctime_ms":1700000000000,"mtime_ms":1700000000000,"change_ms":1700000000000,"mode":493,"complete":true,"owner":"alice","group":"staff"},"parent_mtime_ms":1700000000000,"quotas":[]}}}]}}"#
        );
        assert_eq!(Encoding::Json.decode(got.as_bytes()).unwrap(), record());
    }

    #[test]
    fn postcard_payload_round_trips_and_bad_input_is_an_error() {
        let p = Encoding::Postcard.encode(&record()).unwrap();
        assert_eq!(Encoding::Postcard.decode(&p).unwrap(), record());
        assert!(Encoding::Postcard.decode(&p[..p.len() - 1]).is_err());
        assert!(Encoding::Json.decode(b"{\"Record\":").is_err());
    }

    #[test]
    fn split_cuts_full_parts_and_reassembles() {
        let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let m = split(7, 9, Encoding::Json, payload.clone(), 300);
        assert_eq!(m.len(), 4);
        assert!(m
            .iter()
            .enumerate()
            .all(|(i, x)| x.part == i as u32 + 1 && x.parts == 4));
        assert!(m[..3].iter().all(|x| x.payload.len() == 300));
        let joined: Vec<u8> = m.iter().flat_map(|x| x.payload.to_vec()).collect();
        assert_eq!(joined, payload);
        assert_eq!(m[1].id("ns"), "ns:7:2");
        assert!(m[3].is_last() && !m[2].is_last());
        // A resumed bridge knows the cut from a full part's length.
        assert_eq!(
            split(7, 9, Encoding::Json, payload.clone(), m[0].payload.len()),
            m
        );
        let whole = split(7, 9, Encoding::Json, payload, 1000);
        assert_eq!((whole.len(), whole[0].id("ns")), (1, "ns:7".to_owned()));
        assert!(!whole[0].headers("ns").iter().any(|(k, _)| *k == PART));
    }

    #[test]
    fn marks_parse_and_refuse_what_a_bridge_did_not_write() {
        let h = |seq: Option<&str>, ns: Option<&str>, part: Option<&str>| {
            let (seq, ns, part) = (
                seq.map(str::to_owned),
                ns.map(str::to_owned),
                part.map(str::to_owned),
            );
            move |k: &str| match k {
                SEQ => seq.clone(),
                NAMESPACE => ns.clone(),
                PART => part.clone(),
                _ => None,
            }
        };
        let m = parse_mark(h(Some("42"), Some("ns"), None), 10, "ns").unwrap();
        assert_eq!(m.resume(), (43, 0));
        let m = parse_mark(h(Some("42"), Some("ns"), Some("2/5")), 10, "ns").unwrap();
        assert_eq!(m.resume(), (42, 2));
        let m = parse_mark(h(Some("42"), Some("ns"), Some("5/5")), 10, "ns").unwrap();
        assert_eq!(m.resume(), (43, 0));
        assert!(parse_mark(h(None, Some("ns"), None), 1, "ns").is_err());
        assert!(parse_mark(h(Some("x"), Some("ns"), None), 1, "ns").is_err());
        let other = parse_mark(h(Some("1"), Some("other"), None), 1, "ns").unwrap_err();
        assert!(other.contains("its own stream"), "{other}");
        for bad in ["0/3", "4/3", "1", "a/b"] {
            assert!(
                parse_mark(h(Some("1"), Some("ns"), Some(bad)), 1, "ns").is_err(),
                "{bad}"
            );
        }
    }
}
