//! The bridge's loop: attempts of (read where the bus stands, stream the
//! committed log from the record after it, publish in order with many in
//! flight, acknowledge the treelog cursor behind the bus's acks), started
//! again with backoff after any error that can be retried.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesOrdered, StreamExt};
use tokio::sync::watch;
use treelog_client::{Client, ClientOptions};
use treelog_proto::error::ErrorKind;
use treelog_proto::protocol::{RequestBody, ResponseBody};
use treelog_proto::stream::{Filter, StartFrom, StreamItem, SubscribeOptions};

use crate::metrics::BridgeMetrics;
use crate::payload::{self, Encoding, Message};
use crate::sink::{Acked, Sink, SinkError};

/// Where a bridge starts when the bus holds nothing of the namespace and
/// its cursor does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// The first record still in the log.
    #[default]
    Beginning,
    /// The next record committed.
    Now,
}

/// How to run a bridge. (Its `Debug` leaves the token out.)
#[derive(Clone)]
pub struct BridgeConfig {
    /// The treelog servers whose committed log is published (a leader or a
    /// replica: both serve the same records at the same sequences):
    /// `host:port`, `[v6]:port` or a comma-separated list of them, resolved
    /// at every connect.
    pub server: String,
    pub token: Option<String>,
    /// TLS to the server; `None`: plaintext.
    pub tls: Option<std::sync::Arc<treelog_client::ClientTls>>,
    /// The durable cursor that holds the log's retention at what the bus
    /// has not acknowledged yet (within the server's `--max-cursor-lag`).
    pub cursor: String,
    pub encoding: Encoding,
    pub start: Start,
    /// Most messages sent and not yet acknowledged by the bus.
    pub max_in_flight: usize,
    /// Acknowledge the cursor at least this often while publishing.
    pub ack_interval: Duration,
    /// The longest pause between two attempts after errors.
    pub max_backoff: Duration,
}

impl std::fmt::Debug for BridgeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeConfig")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("cursor", &self.cursor)
            .field("encoding", &self.encoding)
            .field("start", &self.start)
            .field("max_in_flight", &self.max_in_flight)
            .field("ack_interval", &self.ack_interval)
            .field("max_backoff", &self.max_backoff)
            .finish_non_exhaustive()
    }
}

impl BridgeConfig {
    /// A bridge of the servers `server` names (an address, `host:port`, or
    /// a list: see [`BridgeConfig::server`]).
    pub fn new(server: impl ToString) -> BridgeConfig {
        BridgeConfig {
            server: server.to_string(),
            token: None,
            tls: None,
            cursor: "bridge".into(),
            encoding: Encoding::Json,
            start: Start::Beginning,
            max_in_flight: 1024,
            ack_interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Why a bridge stopped by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeError {
    /// Records the bus does not have are no longer in treelog's log: going
    /// on would leave a gap in the stream.
    Gap(String),
    /// The bridge cannot work with what it found (another namespace's
    /// stream, a stream shared with other subjects, a record it cannot
    /// encode or complete).
    Refused(String),
    /// Its task failed.
    Task(String),
}

impl std::fmt::Display for BridgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BridgeError::Gap(m) | BridgeError::Refused(m) | BridgeError::Task(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BridgeError {}

/// How an attempt ended.
enum End {
    Stopped,
    /// Worth another attempt (after a pause); `progressed` resets the
    /// backoff.
    Retry {
        why: String,
        progressed: bool,
    },
    Fatal(BridgeError),
}

impl From<SinkError> for End {
    fn from(e: SinkError) -> End {
        if e.retry {
            End::Retry {
                why: e.message,
                progressed: false,
            }
        } else {
            End::Fatal(BridgeError::Refused(e.message))
        }
    }
}

fn treelog_end(what: &str, e: treelog_proto::Error) -> End {
    match e.kind() {
        ErrorKind::Compacted => End::Fatal(BridgeError::Gap(format!(
            "{what}: {e}. The records after the bus's last message were removed from treelog's log \
             before they were published (the bridge's cursor passed the server's --max-cursor-lag, \
             or was dropped); the stream would have a gap. Publish into a new stream, or purge \
             this one, to start again"
        ))),
        // An expired cursor alone is no gap: the next attempt drops it and
        // checks the bus's position against the log's start.
        _ => End::Retry {
            why: format!("{what}: {e}"),
            progressed: false,
        },
    }
}

/// Runs attempts until `stop` is set (Ok) or an error that cannot be
/// retried (Err; `treelog_bridge_failed` is set).
pub async fn run<S: Sink>(
    cfg: BridgeConfig,
    mut sink: S,
    metrics: Arc<BridgeMetrics>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BridgeError> {
    let mut backoff = Duration::from_millis(100);
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let end = attempt(&cfg, &mut sink, &metrics, &mut stop).await;
        metrics.connected.set(0);
        match end {
            End::Stopped => return Ok(()),
            End::Fatal(why) => {
                metrics.failed.set(1);
                tracing::error!(error = %why, "the bridge stops");
                return Err(why);
            }
            End::Retry { why, progressed } => {
                if progressed {
                    backoff = Duration::from_millis(100);
                }
                metrics.retries.inc();
                tracing::warn!(error = %why, retry_in_ms = backoff.as_millis() as u64, "bridge attempt ended");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return Ok(()),
                }
                backoff = (backoff * 2).min(cfg.max_backoff);
            }
        }
    }
}

/// A message sent and not yet acknowledged.
struct InFlight {
    seq: u64,
    time_ms: u64,
    last_part: bool,
    bytes: usize,
    sent: Instant,
}

/// The record being published and what of it the bus has: `(seq, parts
/// stored, the size they were cut at)` when an attempt resumes inside a
/// split record.
type Resume = (u64, u32, Option<usize>);

async fn attempt<S: Sink>(
    cfg: &BridgeConfig,
    sink: &mut S,
    m: &BridgeMetrics,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let opts = ClientOptions {
        token: cfg.token.clone(),
        tls: cfg.tls.clone(),
        ..Default::default()
    };
    let client = match Client::connect_to(&cfg.server, opts).await {
        Ok(c) => c,
        Err(e) => return treelog_end(&format!("cannot reach treelog at {}", cfg.server), e),
    };
    let status = match client.call(RequestBody::Status).await {
        Ok(ResponseBody::Status(s)) => s,
        Ok(other) => {
            return End::Fatal(BridgeError::Refused(format!(
                "unexpected reply to Status: {other:?}"
            )))
        }
        Err(e) => return treelog_end("status", e),
    };
    let ns = status.namespace.clone();
    m.committed_seq.set(status.applied_seq as i64);
    let opened = match sink.open(&ns).await {
        Ok(o) => o,
        Err(e) => return e.into(),
    };
    // Where the bus stands decides; the cursor only when the bus holds
    // nothing (a purged or expired stream): it never passes what the bus
    // acknowledged.
    let cursors = match client.cursors().await {
        Ok(c) => c,
        Err(e) => return treelog_end("cursors", e),
    };
    let mut cursor = cursors.iter().find(|c| c.name == cfg.cursor);
    if let Some(c) = cursor.filter(|c| c.state.expired.is_some()) {
        // Retention expired it (it lagged past --max-cursor-lag); whether
        // that cut records the bus lacks is decided below, by the bus's
        // own position against the log's start.
        tracing::warn!(cursor = %c.name, acked = c.state.acked, "the bridge's cursor expired: dropping it");
        if let Err(e) = client.drop_cursor(&cfg.cursor).await {
            return treelog_end("dropping the expired cursor", e);
        }
        cursor = None;
    }
    let (seq, skip, cut): Resume = match opened.last {
        Some(mark) => {
            let (seq, skip) = mark.resume();
            (seq, skip, (skip > 0).then_some(mark.len))
        }
        None => match cursor {
            Some(c) if c.state.acked > 0 => (c.state.acked + 1, 0, None),
            _ => match cfg.start {
                Start::Beginning => (status.log_start.max(1), 0, None),
                Start::Now => (status.applied_seq + 1, 0, None),
            },
        },
    };
    if opened.last.is_some() && seq < status.log_start {
        return treelog_end(
            "resuming",
            treelog_proto::Error::PositionGone(format!(
                "the bus ends before record {seq}, and the log starts at {}",
                status.log_start
            )),
        );
    }
    if let Some(mark) = opened.last {
        m.published_seq
            .set(mark.resume().0.saturating_sub(1) as i64);
    }
    let mut sub = match client
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(seq),
            filter: Filter::default(),
            cursor: Some(cfg.cursor.clone()),
            resync_on_move_in: None,
        })
        .await
    {
        Ok(s) => s,
        Err(e) => return treelog_end("subscribing", e),
    };
    m.connected.set(1);
    tracing::info!(
        server = %cfg.server, namespace = %ns, from = seq, parts_stored = skip,
        max_payload = opened.max_payload, "bridge streaming"
    );
    let mut s = Attempt {
        cfg,
        m,
        client: &client,
        resume: (seq, skip, cut),
        max_payload: opened.max_payload,
        pending: VecDeque::new(),
        published: seq - 1,
        last_time_ms: 0,
        acked: None,
        last_ack: Instant::now(),
        progressed: false,
    };
    let mut acks = FuturesOrdered::new();
    let mut tick = tokio::time::interval(cfg.ack_interval);
    let end = loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break End::Stopped,
            Some(acked) = acks.next(), if !acks.is_empty() => {
                if let Err(e) = s.acked(acked) {
                    break e;
                }
            }
            item = sub.next(), if acks.len() < cfg.max_in_flight => match item {
                None => break End::Retry { why: "the change stream ended".into(), progressed: s.progressed },
                Some(Err(e)) => break with_progress(treelog_end("change stream", e), s.progressed),
                Some(Ok(StreamItem::Record { seq, time_ms, events })) => {
                    let item = StreamItem::Record { seq, time_ms, events };
                    match s.messages(&item) {
                        Ok(msgs) => {
                            for msg in msgs {
                                match sink.send(&ns, &msg).await {
                                    Ok(ack) => {
                                        s.pending.push_back(InFlight {
                                            seq: msg.seq,
                                            time_ms: msg.time_ms,
                                            last_part: msg.is_last(),
                                            bytes: msg.payload.len(),
                                            sent: Instant::now(),
                                        });
                                        acks.push_back(ack);
                                    }
                                    Err(e) => return with_progress(e.into(), s.progressed),
                                }
                            }
                        }
                        Err(e) => break e,
                    }
                }
                Some(Ok(_)) => {}
            },
            _ = tick.tick() => {
                if let Err(e) = s.tick().await {
                    break e;
                }
                m.connected.set(i64::from(sink.connected()));
            }
        }
    };
    // What the bus acknowledged is acknowledged to the cursor, whatever
    // ended the attempt (on a stop, the messages in flight first).
    if matches!(end, End::Stopped) {
        let drain = async {
            while let Some(acked) = acks.next().await {
                if s.acked(acked).is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
    }
    let _ = s.ack_cursor().await;
    with_progress(end, s.progressed)
}

fn with_progress(end: End, progressed: bool) -> End {
    match end {
        End::Retry { why, .. } => End::Retry { why, progressed },
        other => other,
    }
}

struct Attempt<'a> {
    cfg: &'a BridgeConfig,
    m: &'a BridgeMetrics,
    client: &'a Client,
    resume: Resume,
    max_payload: usize,
    /// Sent, in order, not yet acknowledged by the bus.
    pending: VecDeque<InFlight>,
    /// The last record the bus acknowledged in full.
    published: u64,
    last_time_ms: u64,
    /// What the cursor was last acknowledged at.
    acked: Option<u64>,
    last_ack: Instant,
    progressed: bool,
}

impl Attempt<'_> {
    /// The messages of a record still to send (none for a record the bus
    /// has: the cursor may start the stream before the bus's end).
    fn messages(&mut self, item: &StreamItem) -> Result<Vec<Message>, End> {
        let StreamItem::Record { seq, time_ms, .. } = *item else {
            return Ok(Vec::new());
        };
        let (from, skip, cut) = self.resume;
        if seq < from {
            return Ok(Vec::new());
        }
        let payload = self.cfg.encoding.encode(item).map_err(|e| {
            End::Fatal(BridgeError::Refused(format!(
                "cannot encode record {seq}: {e}"
            )))
        })?;
        let mut msgs = payload::split(
            seq,
            time_ms,
            self.cfg.encoding,
            payload,
            cut.unwrap_or(self.max_payload),
        );
        if seq == from && skip > 0 {
            // Resuming inside a split record: the same cut gives the same
            // parts, of which the bus has the first `skip`.
            if msgs.len() <= skip as usize || msgs[0].parts as usize != msgs.len() {
                return Err(End::Fatal(BridgeError::Refused(format!(
                    "record {seq} does not split as the bus's parts of it did (was the encoding \
                     changed?): it cannot be completed"
                ))));
            }
            msgs.drain(..skip as usize);
        }
        if let Some(c) = cut.filter(|_| seq == from) {
            debug_assert!(msgs.iter().all(|x| x.payload.len() <= c));
        }
        Ok(msgs)
    }

    fn acked(&mut self, acked: Result<Acked, SinkError>) -> Result<(), End> {
        let sent = self
            .pending
            .pop_front()
            .expect("one in-flight entry per ack future");
        let acked = acked.map_err(End::from)?;
        let m = self.m;
        m.publish_seconds.observe(sent.sent.elapsed().as_secs_f64());
        m.messages.inc();
        m.bytes.inc_by(sent.bytes as u64);
        if acked.duplicate {
            m.duplicates.inc();
        }
        if sent.last_part {
            assert_eq!(
                sent.seq,
                self.published + 1,
                "records are acknowledged in sequence order"
            );
            self.published = sent.seq;
            self.last_time_ms = sent.time_ms;
            self.progressed = true;
            m.records.inc();
            m.published_seq.set(sent.seq as i64);
            let age_ms = treelog_proto::now_ms().saturating_sub(sent.time_ms);
            m.commit_to_ack_seconds.observe(age_ms as f64 / 1000.0);
        }
        Ok(())
    }

    /// Every `ack_interval`: the lag figures, and the cursor.
    async fn tick(&mut self) -> Result<(), End> {
        if let Ok(ResponseBody::Status(st)) = self.client.call(RequestBody::Status).await {
            self.m.committed_seq.set(st.applied_seq as i64);
            let lag = st.applied_seq.saturating_sub(self.published);
            self.m.lag_records.set(lag as i64);
            let oldest = match self.pending.front() {
                Some(p) => Some(p.time_ms),
                None if lag > 0 => Some(self.last_time_ms),
                None => None,
            };
            let secs = oldest
                .filter(|&t| t > 0)
                .map(|t| treelog_proto::now_ms().saturating_sub(t) as f64 / 1000.0)
                .unwrap_or(0.0);
            self.m.lag_seconds.set(secs);
        }
        if self.last_ack.elapsed() >= self.cfg.ack_interval {
            self.ack_cursor()
                .await
                .map_err(|e| treelog_end("acknowledging the cursor", e))?;
        }
        Ok(())
    }

    async fn ack_cursor(&mut self) -> Result<(), treelog_proto::Error> {
        self.last_ack = Instant::now();
        if self.published == 0 || self.acked.is_some_and(|a| a >= self.published) {
            return Ok(());
        }
        self.client.ack(&self.cfg.cursor, self.published).await?;
        self.acked = Some(self.published);
        Ok(())
    }
}
