//! `treelog cluster ...`: a Raft cluster's administration, asked of one of
//! its nodes (`--server`).

use crate::args::{Cli, ClusterCmd};
use crate::error::{Error, Result};
use crate::output::{outln, Out};
use crate::protocol::{ClusterRequest, ClusterStatus, RequestBody, ResponseBody};

pub(crate) fn run(cli: &Cli, out: &Out, cmd: &ClusterCmd) -> Result<u8> {
    let Some(addr) = &cli.server else {
        return Err(Error::InvalidArgument(
            "cluster commands ask a node: give --server ADDR".into(),
        ));
    };
    let req = match cmd {
        ClusterCmd::Status => ClusterRequest::Status,
        ClusterCmd::Init => ClusterRequest::Init,
        ClusterCmd::AddLearner {
            node,
            addr,
            no_wait,
        } => ClusterRequest::AddLearner {
            node: *node,
            addr: addr.clone(),
            wait: !no_wait,
        },
        ClusterCmd::Promote { nodes } => ClusterRequest::Promote {
            nodes: nodes.clone(),
        },
        ClusterCmd::Remove { nodes } => ClusterRequest::Remove {
            nodes: nodes.clone(),
        },
        ClusterCmd::TransferLeader { node } => ClusterRequest::TransferLeader { node: *node },
        ClusterCmd::Snapshot => ClusterRequest::Snapshot,
    };
    let token = crate::backend::read_token(cli.token_file.as_deref())?;
    let crate::backend::Backend::Remote { rt, client } =
        crate::backend::Backend::remote(addr, token, crate::tls::client_tls(cli)?, None)?
    else {
        unreachable!("a remote backend")
    };
    let st = match rt.block_on(client.call(RequestBody::Cluster(req)))? {
        ResponseBody::Cluster(s) => s,
        other => {
            return Err(Error::Protocol(format!(
                "unexpected reply to a cluster request: {other:?}"
            )))
        }
    };
    print_status(out, &st)?;
    Ok(0)
}

fn print_status(out: &Out, st: &ClusterStatus) -> Result<()> {
    if out.json {
        return out.print_json(st);
    }
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    outln!(out, "node:       {} ({})", st.node, st.state)?;
    outln!(out, "term:       {}", st.term)?;
    match (&st.leader, &st.leader_addr) {
        (Some(l), Some(a)) => outln!(out, "leader:     {l} at {a}")?,
        (Some(l), None) => outln!(out, "leader:     {l}")?,
        _ => outln!(out, "leader:     none known")?,
    }
    outln!(
        out,
        "log:        last {}, committed {}, applied {}, snapshot {}, purged {}",
        opt(st.last_log),
        opt(st.committed),
        opt(st.applied),
        opt(st.snapshot),
        opt(st.purged)
    )?;
    outln!(out, "members:")?;
    for m in &st.members {
        let lag = match (m.matched, m.lag) {
            (Some(x), Some(l)) => format!("matched {x}, {l} behind"),
            _ => String::new(),
        };
        outln!(
            out,
            "  {:>4}  {:<8} {:<22} {}",
            m.node,
            if m.voter { "voter" } else { "learner" },
            m.addr,
            lag
        )?;
    }
    Ok(())
}
