//! Following the leader (`ClientOptions::follow_leader`): a mutation a
//! replica or a follower refused with `NotLeader` (not applied) goes to
//! the leader it names, over a connection kept for the next mutations.

use std::sync::Arc;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::client::{deadline_error, Client};
use crate::command::Command;
use crate::connection::{Connection, Failure, OpenError};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::protocol::{self, RequestBody, ResponseBody};

/// How a mutation sent to the held leader connection ended.
enum OnLeader {
    Done(Result<ResponseBody>),
    /// The connection was closed before it took the command: nothing was
    /// sent; send it by the client's own connection.
    Gone,
}

pub(crate) async fn submit_following(client: &Client, cmd: Command) -> Result<u64> {
    let deadline = client.deadline();
    let mut wait_until = Instant::now() + client.options().leader_wait;
    if let Some(d) = deadline {
        wait_until = wait_until.min(d);
    }
    let mut backoff = Backoff::new();
    let mut target = held(client).await;
    loop {
        let sent_to = target.as_ref().map(|(name, _)| name.clone());
        let r = match &target {
            None => client.call(RequestBody::Mutate(cmd.clone())).await,
            Some((_, c)) => match on_leader(client, c, cmd.clone(), deadline).await {
                OnLeader::Done(r) => r,
                OnLeader::Gone => {
                    target = None;
                    continue;
                }
            },
        };
        let err = match r {
            Ok(ResponseBody::Seq(s)) => return Ok(s),
            Ok(other) => return Err(crate::ops::unexpected(other)),
            Err(e) => e,
        };
        let Error::NotLeader { leader } = &err else {
            return Err(err);
        };
        if Instant::now() >= wait_until {
            return Err(err);
        }
        target = None;
        // A leader that names itself no longer (or a stale name): wait.
        if let Some(l) = leader.as_ref().filter(|l| sent_to.as_ref() != Some(*l)) {
            match leader_connection(client, l, deadline).await {
                Ok(c) => {
                    backoff.reset();
                    target = Some((l.clone(), c));
                    continue;
                }
                Err(OpenError::Refused(e)) => return Err(e),
                // Not reached (it may have just died): nothing was sent.
                Err(OpenError::Unreachable(_)) => {}
            }
        }
        // No leader known or reachable: ask another endpoint, after a
        // pause (an election takes a moment).
        if client.endpoints().len() > 1 {
            client
                .shared
                .rotate(&Error::Protocol("looking for the leader".into()));
        }
        let now = Instant::now();
        let pause = backoff
            .next_pause()
            .min(wait_until.saturating_duration_since(now));
        tokio::time::sleep(pause).await;
    }
}

/// The held leader connection, if it is still open.
async fn held(client: &Client) -> Option<(String, Arc<Connection>)> {
    let held = client.shared.leader.lock().await;
    held.as_ref().filter(|(_, c)| c.is_open()).cloned()
}

async fn on_leader(
    client: &Client,
    c: &Arc<Connection>,
    cmd: Command,
    deadline: Option<Instant>,
) -> OnLeader {
    let e = match c
        .call(RequestBody::Mutate(cmd), client.caller.as_deref(), deadline)
        .await
    {
        Ok(reply) => {
            return OnLeader::Done(match protocol::response_error(&reply) {
                Some(e) => Err(e),
                None => Ok(reply),
            })
        }
        Err(Failure::NotSent(_)) => {
            forget(client, c).await;
            return OnLeader::Gone;
        }
        Err(Failure::Deadline { sent: false }) => {
            return OnLeader::Done(Err(deadline_error("sending to the leader")))
        }
        Err(Failure::Deadline { sent: true }) => Error::OutcomeUnknown(format!(
            "no reply from the leader {} before the deadline, after the command was sent",
            c.peer()
        )),
        Err(Failure::Lost(Error::Protocol(m))) => {
            Error::OutcomeUnknown(format!("{m}, after the command was sent"))
        }
        Err(Failure::Lost(e)) => e,
    };
    forget(client, c).await;
    OnLeader::Done(Err(e))
}

/// Drops the held leader connection if it is `c`.
async fn forget(client: &Client, c: &Arc<Connection>) {
    let mut held = client.shared.leader.lock().await;
    if held.as_ref().is_some_and(|(_, h)| Arc::ptr_eq(h, c)) {
        c.close(&crate::connection::lost("dropped after a failure"));
        *held = None;
    }
}

/// The connection to the leader named `name` (a host name or an address,
/// resolved now): the held one when it is to the same name and open, a new
/// one otherwise, which is then held. It shares the client's
/// read-your-writes token and does not follow further itself.
async fn leader_connection(
    client: &Client,
    name: &str,
    deadline: Option<Instant>,
) -> Result<Arc<Connection>, OpenError> {
    let ep = Endpoint::parse(name).map_err(|e| {
        OpenError::Unreachable(Error::Protocol(format!(
            "the server named a leader that does not parse: {e}"
        )))
    })?;
    let mut held = client.shared.leader.lock().await;
    if let Some((n, c)) = held.as_ref() {
        if n == name && c.is_open() {
            return Ok(c.clone());
        }
    }
    let c = client.shared.connect_endpoint(&ep, deadline).await?;
    *held = Some((name.to_owned(), c.clone()));
    Ok(c)
}
