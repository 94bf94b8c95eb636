//! `treelog admin`: verify, rebuild, accept-wal-loss, backup, restore, dump,
//! info, cursors, retention.

use std::io::Write;

use crate::admin;
use crate::args::{AdminCmd, Cli};
use crate::backend::{open, open_local};
use crate::backup;
use crate::describe::{describe_event, long_line, LongFormat};
use crate::error::Result;
use crate::exit::{naming, EXIT_VERIFY_MISMATCH};
use crate::format::record;
use crate::fs::mutation;
use crate::output::{outln, Out};
use crate::store::{Store, StoreOptions};

pub(crate) fn run(cli: &Cli, out: &Out, cmd: &AdminCmd) -> Result<u8> {
    let so = StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    match cmd {
        AdminCmd::Certs(a) => crate::tls::certs(out, a),
        AdminCmd::Verify => {
            let r = admin::verify_path(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": r.ok(), "report": r}))?;
            } else {
                outln!(out, "records replayed: {}", r.records)?;
                outln!(out, "applied_seq:      {}", r.applied_seq)?;
                outln!(out, "live digest:      {}", r.live_digest)?;
                outln!(out, "replay digest:    {}", r.replay_digest)?;
                for p in &r.problems {
                    outln!(out, "problem: {p}")?;
                }
                outln!(
                    out,
                    "{}",
                    if r.ok() {
                        "OK: the index equals a replay of the log"
                    } else {
                        "MISMATCH"
                    }
                )?;
            }
            Ok(if r.ok() { 0 } else { EXIT_VERIFY_MISMATCH })
        }
        AdminCmd::Migrate {
            to,
            dry_run,
            no_verify,
            quiet,
        } => migrate(cli, out, *to, *dry_run, !*no_verify, *quiet),
        AdminCmd::Rebuild => {
            let n = admin::rebuild(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "replayed": n}))?;
            } else {
                outln!(out, "rebuilt the index from {n} log records")?;
            }
            Ok(0)
        }
        AdminCmd::AcceptWalLoss => {
            let r = admin::accept_wal_loss(&cli.data, &so)?;
            // To standard error as well: an operator's record of the loss,
            // whatever happens to the output.
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "treelog: accepted the loss of every write-ahead log record after sequence {} in {}",
                r.last_seq,
                cli.data.display()
            );
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "report": r}))?;
            } else {
                outln!(
                    out,
                    "the log now ends at sequence {}; {} records replayed{}",
                    r.last_seq,
                    r.replayed,
                    if r.rebuilt_index {
                        " (the index held lost records and was rebuilt from the log)"
                    } else {
                        ""
                    }
                )?;
            }
            Ok(0)
        }
        AdminCmd::Backup { dest, chunk_bytes } => {
            if let Some(addr) = &cli.server {
                let token = crate::backend::read_token(cli.token_file.as_deref())?;
                let crate::backend::Backend::Remote { rt, client } =
                    crate::backend::Backend::remote(
                        addr,
                        token,
                        crate::tls::client_tls(cli)?,
                        None,
                    )?
                else {
                    unreachable!("a remote backend")
                };
                let note = |m: &str| {
                    let _ = writeln!(std::io::stderr(), "treelog: {m}");
                };
                let r = rt.block_on(treelog_replica::fetch::fetch(
                    &client,
                    dest,
                    (*chunk_bytes).max(1),
                    note,
                ))?;
                if out.json {
                    out.print_json(&serde_json::json!({"ok": true, "report": r}))?;
                } else {
                    outln!(
                        out,
                        "backup of sequence {} ({} inodes) from {addr} in {}: {} files, {} bytes \
                         ({} fetched before, {} chunks fetched again), {} ms",
                        r.seq,
                        r.inodes,
                        r.dest.display(),
                        r.files,
                        r.bytes,
                        r.resumed_bytes,
                        r.retried_chunks,
                        r.elapsed_ms
                    )?;
                    outln!(out, "index digest: {}", r.index_digest)?;
                }
                return Ok(0);
            }
            let r = backup::backup_path(&cli.data, dest, &so, &mut |_| {})?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "report": r}))?;
            } else {
                outln!(
                    out,
                    "backup of sequence {} ({} inodes) in {}: {} files, {} bytes, {} ms",
                    r.seq,
                    r.inodes,
                    r.dest.display(),
                    r.files,
                    r.bytes,
                    r.elapsed_ms
                )?;
                outln!(out, "index digest: {}", r.index_digest)?;
            }
            Ok(0)
        }
        AdminCmd::Status => {
            let Some(addr) = &cli.server else {
                return Err(crate::error::Error::InvalidArgument(
                    "admin status asks a server: give --server ADDR".into(),
                ));
            };
            let token = crate::backend::read_token(cli.token_file.as_deref())?;
            let crate::backend::Backend::Remote { rt, client } = crate::backend::Backend::remote(
                addr,
                token,
                crate::tls::client_tls(cli)?,
                Some(cli.timeout),
            )?
            else {
                unreachable!("a remote backend")
            };
            let st = match rt.block_on(client.call(crate::protocol::RequestBody::Status))? {
                crate::protocol::ResponseBody::Status(s) => s,
                other => {
                    return Err(crate::error::Error::Protocol(format!(
                        "unexpected reply to Status: {other:?}"
                    )))
                }
            };
            if out.json {
                out.print_json(&st)?;
            } else {
                outln!(out, "role:                 {}", st.role)?;
                if let Some(l) = &st.leader {
                    outln!(out, "leader:               {l}")?;
                    outln!(out, "connected:            {}", st.connected)?;
                }
                outln!(out, "namespace:            {}", st.namespace)?;
                outln!(out, "applied_seq:          {}", st.applied_seq)?;
                outln!(out, "leader_committed_seq: {}", st.leader_committed_seq)?;
                outln!(
                    out,
                    "lag:                  {} records, {} ms",
                    st.lag_records,
                    st.lag_ms
                )?;
                outln!(
                    out,
                    "log:                  from {}, {} bytes",
                    st.log_start,
                    st.log_bytes
                )?;
            }
            Ok(0)
        }
        AdminCmd::Restore { src, data_dir } => {
            let r = backup::restore(src, data_dir, &mut |_| {})?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "report": r}))?;
            } else {
                outln!(
                    out,
                    "restored sequence {} ({} inodes) into {}: {} files, {} bytes checked, \
                     index digest {} as the manifest says, {} ms",
                    r.seq,
                    r.inodes,
                    r.data_dir.display(),
                    r.files,
                    r.bytes,
                    r.index_digest,
                    r.elapsed_ms
                )?;
            }
            Ok(0)
        }
        AdminCmd::Cursors { drop } => {
            let t = open(cli)?;
            if let Some(name) = drop {
                t.drop_cursor(name)?;
                mutation(
                    out,
                    "drop_cursor",
                    &name.as_str().into(),
                    t.committed_seq()?,
                )?;
                return Ok(0);
            }
            let cs = t.cursors()?;
            if out.json {
                out.print_json(&cs)?;
            } else {
                outln!(out, "{:<24} {:>12} {:>10} state", "cursor", "acked", "lag")?;
                for c in cs {
                    let state = match c.state.expired {
                        Some((at, start)) => format!("EXPIRED at {at} (log start {start})"),
                        None => "live".into(),
                    };
                    outln!(
                        out,
                        "{:<24} {:>12} {:>10} {state}",
                        c.name,
                        c.state.acked,
                        c.lag
                    )?;
                }
            }
            Ok(0)
        }
        AdminCmd::Retention {
            max_records,
            max_age,
            max_bytes,
            max_cursor_lag,
        } => {
            let t = open_local(cli)?;
            let rep = t.run_retention(&crate::retention::RetentionPolicy {
                max_records: *max_records,
                max_age: max_age.map(std::time::Duration::from_secs),
                max_bytes: *max_bytes,
                max_cursor_lag: *max_cursor_lag,
                interval: None,
            })?;
            if out.json {
                out.print_json(&rep)?;
            } else {
                outln!(
                    out,
                    "log start {} -> {} ({} records, {} bytes removed); expired cursors: {:?}; held by: {:?}",
                    rep.old_start, rep.new_start, rep.removed_records, rep.removed_bytes, rep.expired_cursors, rep.held_by_cursor
                )?;
            }
            Ok(0)
        }
        AdminCmd::Credential { cmd } => crate::credential::run(out, cmd),
        AdminCmd::Info => {
            // Any version: a database to migrate says so here.
            let store = Store::open_unmigrated(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            let migration = store
                .get_meta(crate::format::meta::MIGRATION_KEY)?
                .map(|m| crate::format::meta::Migration::decode(&m))
                .transpose()?;
            let version = store.format_version()?;
            let needs_migration = migration.is_some() || version < crate::format::FORMAT_VERSION;
            let info = serde_json::json!({
                "format_version": version,
                "needs_migration": needs_migration,
                "migration": migration.map(|m| serde_json::json!({
                    "from": m.from, "to": m.to, "next_id": m.next_id,
                })),
                "log_start": store.log_start()?,
                "applied_seq": store.applied_seq()?,
                "last_seq": store.last_log_seq()?,
                "wal_loss_accepted": admin::last_wal_loss(&store)?,
            });
            if out.json {
                out.print_json(&info)?;
            } else {
                outln!(out, "format_version: {}", info["format_version"])?;
                if needs_migration {
                    outln!(
                        out,
                        "migration:      {} (run `treelog admin migrate`)",
                        match migration {
                            Some(m) => format!(
                                "from {} to {} interrupted at inode {}",
                                m.from, m.to, m.next_id
                            ),
                            None => format!("needed to reach {}", crate::format::FORMAT_VERSION),
                        }
                    )?;
                }
                outln!(out, "log_start:      {}", info["log_start"])?;
                outln!(
                    out,
                    "applied_seq:    {} (index; replayed on open up to last_seq)",
                    info["applied_seq"]
                )?;
                outln!(out, "last_seq:       {}", info["last_seq"])?;
                if let Some(l) = admin::last_wal_loss(&store)? {
                    outln!(
                        out,
                        "wal loss:       accepted at {} ms, the log kept up to {}",
                        l.time_ms,
                        l.last_seq
                    )?;
                }
            }
            Ok(0)
        }
        AdminCmd::Dump {
            log,
            index,
            from,
            limit,
        } => {
            let store = Store::open(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            let (show_log, show_index) = match (log, index) {
                (false, false) => (true, true),
                (l, i) => (*l, *i),
            };
            if show_log {
                if !out.json {
                    outln!(out, "== log (from {from}) ==")?;
                }
                for (n, item) in store.log_entries(*from)?.enumerate() {
                    if limit.is_some_and(|l| n as u64 >= l) {
                        break;
                    }
                    let (seq, v) = item?;
                    match record::decode_record(&v, Some(seq)) {
                        Ok(rec) if out.json => out.print_json(&serde_json::json!({"log": rec}))?,
                        Ok(rec) => {
                            outln!(out, "#{} t={} ({} bytes)", rec.seq, rec.time_ms, v.len())?;
                            for ev in &rec.events {
                                outln!(out, "    {}", describe_event(ev))?;
                            }
                        }
                        Err(e) => outln!(out, "#{seq} CORRUPT: {e}")?,
                    }
                }
            }
            if show_index {
                if !out.json {
                    outln!(out, "== index ==")?;
                }
                let long = LongFormat::exact();
                admin::dump_index(&store, |e| {
                    if out.json {
                        out.print_json(&e)
                    } else {
                        let line = match &e {
                            admin::DumpEntry::Inode {
                                key_hex,
                                id,
                                inode: Some(i),
                                ..
                            } => {
                                format!("inodes {key_hex} id={id} {}", long_line(i, &i.name, &long))
                            }
                            admin::DumpEntry::Inode {
                                key_hex, id, error, ..
                            } => {
                                format!(
                                    "inodes {key_hex} id={id} CORRUPT: {}",
                                    error.as_deref().unwrap_or("?")
                                )
                            }
                            admin::DumpEntry::Special {
                                key_hex,
                                what,
                                value,
                            } => {
                                format!("inodes {key_hex} {what} = {value}")
                            }
                            admin::DumpEntry::Edge {
                                key_hex,
                                parent,
                                name,
                                child,
                            } => {
                                format!("edges  {key_hex} ({parent}, {name:?}) -> {child}")
                            }
                        };
                        outln!(out, "{line}")
                    }
                })?;
            }
            Ok(0)
        }
    }
}

/// `admin migrate`: runs the migration with a progress bar on standard
/// error (when it is a terminal), then reports.
fn migrate(cli: &Cli, out: &Out, to: u64, dry_run: bool, verify: bool, quiet: bool) -> Result<u8> {
    if cli.server.is_some() {
        return Err(crate::error::Error::InvalidArgument(
            "admin migrate works on a local --data directory, with no server running on it".into(),
        ));
    }
    let pb = crate::output::progress_bar(
        quiet,
        "{spinner} migrating: {pos}/~{len} inodes {wide_bar} {rate} inodes/s, {elapsed}",
    );
    let opts = treelog::migrate::MigrateOptions {
        to,
        dry_run,
        verify,
    };
    let so = StoreOptions::default();
    let r = treelog::migrate::migrate(&cli.data, &so, &opts, |done, total| {
        pb.set_length(total.max(done));
        pb.set_position(done);
    })
    .map_err(|e| naming(&cli.data, e));
    pb.finish_and_clear();
    let r = r?;
    if out.json {
        out.print_json(&serde_json::json!({"ok": r.ok(), "report": r}))?;
    } else if r.already {
        outln!(out, "the database is at format version {} already", r.to)?;
    } else {
        let verb = if r.dry_run {
            "would migrate"
        } else {
            "migrated"
        };
        outln!(
            out,
            "{verb} format version {} to {}{}: {} inodes, {} owners, {} groups, {} batches, {} bytes, {} ms",
            r.from,
            r.to,
            match r.resumed_at {
                Some(at) => format!(" (resumed at inode {at})"),
                None => String::new(),
            },
            r.inodes,
            r.owners,
            r.groups,
            r.batches,
            r.bytes,
            r.elapsed_ms
        )?;
        if r.dry_run {
            outln!(
                out,
                "limits lifted: owners {} of 255 -> of 4294967295, groups {} of 255 -> of 4294967295; \
                 the log stays as written (schema-1 records keep their rules)",
                r.owners,
                r.groups
            )?;
        }
        if r.rebuilt {
            outln!(
                out,
                "the index was being rebuilt: rebuilt in format 2 from the log"
            )?;
        }
        if r.replayed > 0 {
            outln!(out, "replayed {} records the index lacked", r.replayed)?;
        }
        if let Some(v) = &r.verify {
            outln!(
                out,
                "verify: {} records replayed, {}",
                v.records,
                if v.ok() {
                    "OK: the index equals a replay of the log"
                } else {
                    "MISMATCH"
                }
            )?;
        }
        for p in r
            .problems
            .iter()
            .chain(r.verify.iter().flat_map(|v| &v.problems))
        {
            outln!(out, "problem: {p}")?;
        }
    }
    Ok(if r.ok() { 0 } else { EXIT_VERIFY_MISMATCH })
}
