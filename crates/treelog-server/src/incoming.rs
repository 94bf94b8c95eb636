//! A connection's incoming frames: requests read from a buffer, many per
//! system call when a client pipelines them.

use std::time::Duration;

use tokio::io::AsyncBufRead;

use treelog::{Error, Result};
use treelog_proto::protocol::{self, ClientMsg};
use treelog_proto::v1;

use crate::stream::ConnRead;

/// The read half of a connection's socket, buffered: a pipelining
/// client's frames arrive many per segment, and reading each one's length
/// and body straight from the socket would cost two system calls per
/// request.
pub(crate) type ReadHalf = tokio::io::BufReader<ConnRead>;

/// `rd`, buffered (see [`ReadHalf`]).
pub(crate) fn buffered(rd: ConnRead) -> ReadHalf {
    tokio::io::BufReader::with_capacity(64 << 10, rd)
}

/// The next message; `None` when the client closed the connection. With
/// `wait`, an error when no complete frame arrives within it.
pub(crate) async fn read_msg(
    rd: &mut ReadHalf,
    max: usize,
    wait: Option<Duration>,
) -> Result<Option<ClientMsg>> {
    // Every version's Hello is the same message.
    let version = protocol::PROTOCOL_VERSION;
    Ok(read_sized(rd, max, wait, version).await?.map(|(m, _)| m))
}

/// [`read_msg`], with the size of the frame the message came in (what
/// the connection's budget of request bytes in flight charges it),
/// decoded as protocol `version` has it and translated to today's.
pub(crate) async fn read_sized(
    rd: &mut ReadHalf,
    max: usize,
    wait: Option<Duration>,
    version: u16,
) -> Result<Option<(ClientMsg, usize)>> {
    // A frame already whole in the buffer (a pipelining client's mostly
    // are) is decoded where it lies: no timer, no copy.
    if let Some(len) = buffered_frame_len(rd) {
        if len > max {
            return Err(protocol::frame_too_large(len, max));
        }
        let payload = &rd.buffer()[4..4 + len];
        let msg = if version == v1::VERSION {
            v1::decode_client(payload)?
        } else {
            protocol::decode::<ClientMsg>(payload)?
        };
        std::pin::Pin::new(&mut *rd).consume(4 + len);
        return Ok(Some((msg, len)));
    }
    let frame = match wait {
        Some(d) => match tokio::time::timeout(d, protocol::read_frame(rd, max)).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Protocol(format!(
                    "no complete frame within {} s",
                    d.as_secs()
                )))
            }
        },
        None => protocol::read_frame(rd, max).await?,
    };
    match frame {
        Some(f) if version == v1::VERSION => Ok(Some((v1::decode_client(&f)?, f.len()))),
        Some(f) => Ok(Some((protocol::decode::<ClientMsg>(&f)?, f.len()))),
        None => Ok(None),
    }
}

/// Whether a whole frame waits in the connection's read buffer.
pub(crate) fn frame_buffered(rd: &ReadHalf) -> bool {
    buffered_frame_len(rd).is_some()
}

/// The payload length of the whole frame at the front of the read buffer.
fn buffered_frame_len(rd: &ReadHalf) -> Option<usize> {
    let b = rd.buffer();
    let len = u32::from_be_bytes(b.get(..4)?.try_into().ok()?) as usize;
    (b.len() - 4 >= len).then_some(len)
}
