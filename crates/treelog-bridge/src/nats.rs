//! The NATS JetStream sink.
//!
//! One stream per namespace, holding only the bridge's subject: every
//! message carries `Nats-Expected-Last-Sequence`, the stream sequence the
//! message before it got, so a message is stored only right after its
//! predecessor. That is what lets many publishes be in flight without a
//! gap (a failed one makes every later one of the attempt fail too), and
//! what stops two bridges racing on one stream from interleaving: the
//! second's next publish fails and its attempt starts again from the
//! stream's last message. `Nats-Msg-Id` (`<namespace>:<seq>`) adds
//! JetStream's de-duplication within its window on top.

use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage, stream};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::payload::{self, Message};
use crate::sink::{Acked, Opened, Sink, SinkError};

/// Bytes of a message kept for headers: NATS counts headers and payload
/// against its `max_payload` (ours take ~250 bytes).
pub const HEADER_ROOM: usize = 1024;

/// How to reach the stream.
/// (Its `Debug` shows the URL without a user and password in it.)
#[derive(Clone)]
pub struct NatsConfig {
    /// `nats://host:port` (several, comma-separated, for a cluster).
    pub url: String,
    pub stream: String,
    /// `None`: `treelog.<namespace id>.log`.
    pub subject: Option<String>,
    /// Create the stream when it does not exist, with this many replicas.
    pub create_replicas: Option<usize>,
    /// How long a publish waits for JetStream's ack.
    pub ack_timeout: Duration,
    /// Cut records at most this many bytes (below the server's limit).
    pub max_payload: Option<usize>,
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &redact_userinfo(&self.url))
            .field("stream", &self.stream)
            .field("subject", &self.subject)
            .field("create_replicas", &self.create_replicas)
            .field("ack_timeout", &self.ack_timeout)
            .field("max_payload", &self.max_payload)
            .finish_non_exhaustive()
    }
}

/// `url` (comma-separated URLs) with each `user:password@` or `token@`
/// replaced by `<redacted>@`.
pub fn redact_userinfo(url: &str) -> String {
    url.split(',')
        .map(|u| {
            let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
            let rest = match rest.split_once('@') {
                Some((_, host)) => format!("<redacted>@{host}"),
                None => rest.to_owned(),
            };
            if scheme.is_empty() {
                rest
            } else {
                format!("{scheme}://{rest}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl NatsConfig {
    pub fn new(url: impl Into<String>, stream: impl Into<String>) -> NatsConfig {
        NatsConfig {
            url: url.into(),
            stream: stream.into(),
            subject: None,
            create_replicas: Some(1),
            ack_timeout: Duration::from_secs(5),
            max_payload: None,
        }
    }

    /// The subject records of `namespace` go to.
    pub fn subject_for(&self, namespace: &str) -> String {
        self.subject
            .clone()
            .unwrap_or_else(|| format!("treelog.{namespace}.log"))
    }
}

pub struct NatsSink {
    cfg: NatsConfig,
    js: Option<jetstream::Context>,
    client: Option<async_nats::Client>,
    subject: String,
    /// The stream sequence the last message sent got (or will get).
    last_sent: u64,
}

impl NatsSink {
    pub fn new(cfg: NatsConfig) -> NatsSink {
        NatsSink {
            cfg,
            js: None,
            client: None,
            subject: String::new(),
            last_sent: 0,
        }
    }

    pub fn config(&self) -> &NatsConfig {
        &self.cfg
    }
}

/// The servers of a comma-separated URL list (`nats://a:4222,nats://b:4222`).
pub fn server_addrs(urls: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("NATS URL {u:?}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err("no NATS URL given".to_owned())
            } else {
                Ok(v)
            }
        })
}

fn retry(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError::retry(format!("{what}: {e}"))
}

impl Sink for NatsSink {
    type Ack = BoxFuture<'static, Result<Acked, SinkError>>;

    async fn open(&mut self, namespace: &str) -> Result<Opened, SinkError> {
        // A new connection per attempt: whatever the old one still had
        // queued can no longer be stored after the last message is read.
        self.js = None;
        let servers = server_addrs(&self.cfg.url).map_err(SinkError::fatal)?;
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(servers)
            .await
            .map_err(|e| {
                retry(
                    &format!(
                        "cannot connect to NATS at {}",
                        redact_userinfo(&self.cfg.url)
                    ),
                    e,
                )
            })?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(self.cfg.ack_timeout);
        let subject = self.cfg.subject_for(namespace);
        let mut st = match js.get_stream(&self.cfg.stream).await {
            Ok(st) => st,
            Err(e) => match (&e.kind(), self.cfg.create_replicas) {
                (jetstream::context::GetStreamErrorKind::JetStream(j), Some(replicas))
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    tracing::info!(stream = %self.cfg.stream, %subject, replicas, "creating the stream");
                    js.create_stream(stream::Config {
                        name: self.cfg.stream.clone(),
                        subjects: vec![subject.clone()],
                        num_replicas: replicas,
                        storage: stream::StorageType::File,
                        duplicate_window: Duration::from_secs(120),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| match e.kind() {
                        // JetStream answered: its refusal (subjects that
                        // overlap another stream's, limits) will not change.
                        jetstream::context::CreateStreamErrorKind::JetStream(j) => {
                            SinkError::fatal(format!(
                                "cannot create stream {} for subject {subject:?}: {j}",
                                self.cfg.stream
                            ))
                        }
                        _ => retry("cannot create the stream", e),
                    })?
                }
                _ => return Err(retry(&format!("stream {}", self.cfg.stream), e)),
            },
        };
        let info = st
            .info()
            .await
            .map_err(|e| retry("cannot read the stream's state", e))?
            .clone();
        if info.config.subjects != [subject.clone()] {
            return Err(SinkError::fatal(format!(
                "stream {} has subjects {:?}: the bridge needs a stream of its own subject {subject:?} \
                 (its sequence guard covers the whole stream)",
                self.cfg.stream, info.config.subjects
            )));
        }
        // The guard of the first message is the stream sequence of the very
        // message we resume after, not the stream's last sequence as `info`
        // read it earlier: another bridge may publish in between, and a
        // guard one behind the mark would let a later message land after a
        // gap.
        let (last, last_seq) = match st.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => {
                let get = |k: &str| m.headers.get(k).map(|v| v.as_str().to_owned());
                let mark = payload::parse_mark(get, m.payload.len(), namespace)
                    .map_err(|e| SinkError::fatal(format!("stream {}: {e}", self.cfg.stream)))?;
                (Some(mark), m.sequence)
            }
            // Empty (or emptied by a purge, which leaves its sequence).
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => {
                (None, info.state.last_sequence)
            }
            Err(e) => return Err(retry("cannot read the stream's last message", e)),
        };
        let server_max = client.server_info().max_payload;
        let stream_max = usize::try_from(info.config.max_message_size)
            .ok()
            .filter(|&m| m > 0)
            .unwrap_or(usize::MAX);
        let mut max_payload = server_max.min(stream_max).saturating_sub(HEADER_ROOM);
        if let Some(m) = self.cfg.max_payload {
            max_payload = max_payload.min(m);
        }
        if max_payload == 0 {
            return Err(SinkError::fatal(format!(
                "the server's max_payload ({server_max}) leaves no room for a record"
            )));
        }
        self.last_sent = last_seq;
        self.subject = subject;
        self.js = Some(js);
        self.client = Some(client);
        Ok(Opened { last, max_payload })
    }

    fn connected(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected)
    }

    async fn send(&mut self, namespace: &str, msg: &Message) -> Result<Self::Ack, SinkError> {
        let js = self
            .js
            .as_ref()
            .ok_or_else(|| SinkError::retry("not connected"))?;
        let mut p = PublishMessage::build()
            .payload(msg.payload.clone())
            .message_id(msg.id(namespace))
            .expected_last_sequence(self.last_sent);
        for (k, v) in msg.headers(namespace) {
            p = p.header(k, v);
        }
        let ack = js
            .send_publish(self.subject.clone(), p)
            .await
            .map_err(|e| retry("publish", e))?;
        // The guard of the next message: this one's place in the stream.
        self.last_sent += 1;
        Ok(async move {
            match ack.await {
                Ok(a) => Ok(Acked {
                    duplicate: a.duplicate,
                }),
                Err(e) => Err(retry("publish not acknowledged", e)),
            }
        }
        .boxed())
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    #[test]
    fn debug_and_messages_leave_nats_credentials_out() {
        let c = NatsConfig::new("nats://bob:pa55word@h1:4222,tls://tok3n@h2:4222", "s");
        let d = format!("{c:?}");
        assert!(
            !d.contains("pa55word") && !d.contains("bob") && !d.contains("tok3n"),
            "{d}"
        );
        assert!(
            d.contains("nats://<redacted>@h1:4222,tls://<redacted>@h2:4222"),
            "{d}"
        );
        assert_eq!(redact_userinfo("nats://h:4222"), "nats://h:4222");
    }
}
