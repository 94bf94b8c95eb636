//! Valid values, encoded by the real encoders.

use super::*;

pub(crate) fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9._/-]{0,12}",
        1 => "\\PC{0,6}",
    ]
}

pub(crate) fn file_type() -> impl Strategy<Value = FileType> {
    prop_oneof![
        Just(FileType::File),
        Just(FileType::Directory),
        Just(FileType::Symlink)
    ]
}

pub(crate) fn attrs() -> impl Strategy<Value = Attrs> {
    (
        (file_type(), any::<u64>(), any::<u64>(), any::<u64>()),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            text(),
            text(),
        ),
    )
        .prop_map(
            |(
                (kind, size, block_size, ctime_ms),
                (mtime_ms, change_ms, mode, complete, owner, group),
            )| Attrs {
                kind,
                size,
                block_size,
                ctime_ms,
                mtime_ms,
                change_ms,
                mode,
                complete,
                owner,
                group,
            },
        )
}

pub(crate) fn ids() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(any::<u64>(), 0..3)
}

pub(crate) fn usage() -> impl Strategy<Value = Usage> {
    any::<[u64; 4]>().prop_map(|[files, directories, symlinks, bytes]| Usage {
        files,
        directories,
        symlinks,
        bytes,
    })
}

pub(crate) fn quota() -> impl Strategy<Value = Quota> {
    (any::<Option<u64>>(), any::<Option<u64>>(), usage()).prop_map(
        |(limit_inodes, limit_bytes, usage)| Quota {
            limit_inodes,
            limit_bytes,
            usage,
        },
    )
}

pub(crate) fn update() -> impl Strategy<Value = Update> {
    (
        any::<u64>(),
        any::<u64>(),
        text(),
        text(),
        attrs(),
        attrs(),
        ids(),
    )
        .prop_map(|(id, parent, name, path, old, new, quotas)| Update {
            id,
            parent,
            name: name.into(),
            path: path.into(),
            old,
            new,
            quotas,
        })
}

pub(crate) fn event() -> impl Strategy<Value = Event> {
    let node = || {
        (
            (any::<u64>(), any::<u64>(), text(), text(), attrs()),
            any::<Option<u64>>(),
            ids(),
        )
    };
    prop_oneof![
        node().prop_map(
            |((id, parent, name, path, attrs), parent_mtime_ms, quotas)| Event::Create {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                attrs,
                parent_mtime_ms,
                quotas
            }
        ),
        update().prop_map(Event::Complete),
        update().prop_map(Event::SetSize),
        update().prop_map(Event::SetAttr),
        node().prop_map(
            |((id, parent, name, path, attrs), parent_mtime_ms, quotas)| Event::Delete {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                attrs,
                parent_mtime_ms,
                quotas
            }
        ),
        (
            (any::<u64>(), any::<u64>(), text(), text()),
            (any::<u64>(), text(), text(), attrs()),
            (any::<Option<u64>>(), ids(), ids(), usage()),
        )
            .prop_map(
                |(
                    (id, old_parent, old_name, old_path),
                    (new_parent, new_name, new_path, attrs),
                    (parent_mtime_ms, quotas_from, quotas_to, usage),
                )| {
                    Event::Rename {
                        id,
                        old_parent,
                        old_name: old_name.into(),
                        old_path: old_path.into(),
                        new_parent,
                        new_name: new_name.into(),
                        new_path: new_path.into(),
                        attrs,
                        parent_mtime_ms,
                        quotas_from,
                        quotas_to,
                        usage,
                    }
                }
            ),
        (node(), text()).prop_map(|(((id, parent, name, path, attrs), t, quotas), target)| {
            Event::Symlink {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                target: target.into(),
                attrs,
                parent_mtime_ms: t.unwrap_or(0),
                quotas,
            }
        }),
        (
            any::<u64>(),
            text(),
            text(),
            bytes(20),
            prop::option::of(bytes(20)),
            any::<u64>()
        )
            .prop_map(|(id, path, name, value, old, change_ms)| Event::SetXattr {
                id,
                path: path.into(),
                name,
                value: Bytes(value),
                old: old.map(Bytes),
                change_ms
            }),
        (any::<u64>(), text(), text(), bytes(20), any::<u64>()).prop_map(
            |(id, path, name, old, change_ms)| Event::RemoveXattr {
                id,
                path: path.into(),
                name,
                old: Bytes(old),
                change_ms
            }
        ),
        (any::<u64>(), text(), quota()).prop_map(|(id, path, quota)| Event::SetQuota {
            id,
            path: path.into(),
            quota
        }),
        (any::<u64>(), text(), quota()).prop_map(|(id, path, old)| Event::ClearQuota {
            id,
            path: path.into(),
            old
        }),
    ]
}

pub(crate) fn record() -> impl Strategy<Value = Record> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(event(), 0..4),
    )
        .prop_map(|(seq, time_ms, events)| Record {
            seq,
            time_ms,
            events,
        })
}

pub(crate) fn inode_entry() -> impl Strategy<Value = InodeEntry> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (any::<u64>(), any::<u32>(), 0u8..4, any::<u8>(), any::<u8>()),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(
            |(
                (parent_id, size, block_size, creation_time_ms),
                (mtime, mode, flags, o, g),
                name,
            )| {
                InodeEntry {
                    parent_id,
                    size,
                    block_size,
                    creation_time_ms,
                    modification_time_ms: mtime,
                    mode,
                    flags,
                    owner_id: o,
                    group_id: g,
                    name,
                }
            },
        )
}

pub(crate) fn dict() -> impl Strategy<Value = Dict> {
    prop_oneof![
        4 => prop::collection::btree_set("[a-z0-9_]{1,12}", 0..12),
        1 => prop::collection::btree_set("[a-z]{1,255}", 0..4),
    ]
    .prop_map(|names| {
        let mut d = Dict::default();
        for n in &names {
            d.intern(DictKind::Owner, n).unwrap();
        }
        d
    })
}

pub(crate) fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop::sample::select(vec![
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::NotADirectory,
        ErrorKind::IsADirectory,
        ErrorKind::NotEmpty,
        ErrorKind::InvalidName,
        ErrorKind::InvalidPath,
        ErrorKind::InvalidArgument,
        ErrorKind::DictionaryFull,
        ErrorKind::NotLeader,
        ErrorKind::Compacted,
        ErrorKind::CursorExpired,
        ErrorKind::Corruption,
        ErrorKind::Incompatible,
        ErrorKind::WriterStopped,
        ErrorKind::ShuttingDown,
        ErrorKind::Protocol,
        ErrorKind::Unauthorized,
        ErrorKind::Busy,
        ErrorKind::Io,
        ErrorKind::OutcomeUnknown,
        ErrorKind::Lagging,
        ErrorKind::QuotaExceeded,
        ErrorKind::PermissionDenied,
        ErrorKind::DeadlineExceeded,
        ErrorKind::NotPermitted,
    ])
}

pub(crate) fn event_kind() -> impl Strategy<Value = EventKind> {
    prop::sample::select(EventKind::ALL.to_vec())
}

pub(crate) fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (text(), any::<bool>(), any::<u32>(), text(), text()).prop_map(
            |(path, parents, mode, owner, group)| Command::Mkdir {
                path: path.into(),
                parents,
                mode,
                owner,
                group
            }
        ),
        (
            text(),
            any::<bool>(),
            any::<u32>(),
            text(),
            text(),
            any::<u64>()
        )
            .prop_map(|(path, parents, mode, owner, group, block_size)| {
                Command::Create {
                    path: path.into(),
                    parents,
                    mode,
                    owner,
                    group,
                    block_size,
                }
            }),
        (text(), any::<u64>()).prop_map(|(path, size)| Command::Complete {
            path: path.into(),
            size
        }),
        (text(), any::<u64>()).prop_map(|(path, size)| Command::SetSize {
            path: path.into(),
            size
        }),
        (
            text(),
            any::<Option<u32>>(),
            prop::option::of(text()),
            prop::option::of(text()),
            any::<Option<u64>>()
        )
            .prop_map(|(path, mode, owner, group, mtime_ms)| Command::SetAttr {
                path: path.into(),
                mode,
                owner,
                group,
                mtime_ms
            }),
        (text(), any::<bool>()).prop_map(|(path, recursive)| Command::Delete {
            path: path.into(),
            recursive
        }),
        (text(), text(), any::<bool>()).prop_map(|(src, dst, overwrite)| Command::Rename {
            src: src.into(),
            dst: dst.into(),
            overwrite
        }),
        (text(), text(), any::<bool>(), text(), text()).prop_map(
            |(target, path, parents, owner, group)| Command::Symlink {
                target: target.into(),
                path: path.into(),
                parents,
                owner,
                group
            }
        ),
        (
            text(),
            text(),
            bytes(20),
            prop::sample::select(vec![
                XattrFlag::Either,
                XattrFlag::Create,
                XattrFlag::Replace
            ])
        )
            .prop_map(|(path, name, value, flag)| Command::SetXattr {
                path: path.into(),
                name,
                value: Bytes(value),
                flag
            }),
        (text(), text()).prop_map(|(path, name)| Command::RemoveXattr {
            path: path.into(),
            name
        }),
        (text(), any::<Option<u64>>(), any::<Option<u64>>()).prop_map(|(path, inodes, bytes)| {
            Command::SetQuota {
                path: path.into(),
                inodes,
                bytes,
            }
        }),
        text().prop_map(|path| Command::ClearQuota { path: path.into() }),
        text().prop_map(|path| Command::RecountQuota { path: path.into() }),
    ]
}

pub(crate) fn subscribe_options() -> impl Strategy<Value = SubscribeOptions> {
    (
        prop_oneof![
            any::<u64>().prop_map(StartFrom::Seq),
            Just(StartFrom::Now),
            Just(StartFrom::Snapshot),
        ],
        prop::option::of(text()),
        prop::option::of(prop::collection::vec(event_kind(), 0..4)),
        prop::option::of(text()),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(from, prefix, kinds, cursor, resync_on_move_in)| SubscribeOptions {
                from,
                filter: Filter {
                    prefix: prefix.map(Into::into),
                    kinds,
                },
                cursor,
                resync_on_move_in,
            },
        )
}

pub(crate) fn hello() -> impl Strategy<Value = Hello> {
    (
        prop_oneof![3 => Just(protocol::MAGIC), 1 => any::<[u8; 4]>()],
        prop_oneof![3 => Just(protocol::PROTOCOL_VERSION), 1 => any::<u16>()],
        prop::option::of(text()),
        text(),
    )
        .prop_map(|(magic, version, token, client)| Hello {
            magic,
            version,
            token,
            client,
        })
}

pub(crate) fn request_body() -> impl Strategy<Value = RequestBody> {
    prop_oneof![
        command().prop_map(RequestBody::Mutate),
        text().prop_map(|path| RequestBody::Stat { path: path.into() }),
        any::<u64>().prop_map(|id| RequestBody::StatId { id }),
        (text(), prop::option::of(text()), any::<u32>()).prop_map(|(path, start_after, limit)| {
            RequestBody::List {
                path: path.into(),
                start_after: start_after.map(Into::into),
                limit,
            }
        }),
        subscribe_options().prop_map(RequestBody::Subscribe),
        any::<u64>().prop_map(|target| RequestBody::Cancel { target }),
        (text(), any::<u64>()).prop_map(|(cursor, seq)| RequestBody::Ack { cursor, seq }),
        Just(RequestBody::ListCursors),
        text().prop_map(|cursor| RequestBody::DropCursor { cursor }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(seq, timeout_ms)| RequestBody::WaitFor { seq, timeout_ms }),
        Just(RequestBody::Ping),
        Just(RequestBody::Info),
        prop::option::of(any::<u64>()).prop_map(|resume| RequestBody::BackupBegin { resume }),
        (any::<u64>(), text(), any::<u64>(), any::<u32>()).prop_map(|(id, file, offset, len)| {
            RequestBody::BackupChunk {
                id,
                file,
                offset,
                len,
            }
        }),
        any::<u64>().prop_map(|id| RequestBody::BackupEnd { id }),
        text().prop_map(|path| RequestBody::Readlink {
            path: path.into(),
            at: ReadAt::Latest
        }),
        (text(), prop::option::of(text())).prop_map(|(path, name)| RequestBody::GetXattrs {
            path: path.into(),
            name,
            at: ReadAt::Latest
        }),
        text().prop_map(|path| RequestBody::Count {
            path: path.into(),
            at: ReadAt::Latest
        }),
    ]
}

pub(crate) fn client_msg() -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        1 => hello().prop_map(ClientMsg::Hello),
        3 => (any::<u64>(), request_body()).prop_map(|(id, body)| ClientMsg::Request { id, body }),
    ]
}

pub(crate) fn inode() -> impl Strategy<Value = Inode> {
    (any::<u64>(), any::<u64>(), text(), attrs()).prop_map(|(id, parent, name, attrs)| Inode {
        id,
        parent,
        name: name.into(),
        attrs,
    })
}

pub(crate) fn cursor_state() -> impl Strategy<Value = CursorState> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<Option<(u64, u64)>>(),
    )
        .prop_map(|(acked, created_ms, updated_ms, expired)| CursorState {
            acked,
            created_ms,
            updated_ms,
            expired,
        })
}

pub(crate) fn stream_item() -> impl Strategy<Value = StreamItem> {
    let scope = prop::sample::select(vec![
        Scope::Inside,
        Scope::MoveIn,
        Scope::MoveOut,
        Scope::Ancestor,
    ]);
    prop_oneof![
        (any::<u64>(), text(), any::<bool>()).prop_map(|(seq, prefix, resync)| {
            StreamItem::SnapshotStart {
                seq,
                prefix: prefix.into(),
                resync,
            }
        }),
        (text(), inode()).prop_map(|(path, inode)| StreamItem::SnapshotEntry {
            path: path.into(),
            inode: Box::new(inode)
        }),
        any::<u64>().prop_map(|seq| StreamItem::SnapshotEnd { seq }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec((scope, event()), 0..3)
        )
            .prop_map(|(seq, time_ms, evs)| StreamItem::Record {
                seq,
                time_ms,
                events: evs
                    .into_iter()
                    .map(|(scope, e)| ScopedEvent {
                        scope,
                        event: Arc::new(e),
                    })
                    .collect(),
            }),
        any::<u64>().prop_map(|seq| StreamItem::Progress { seq }),
    ]
}

pub(crate) fn response_body() -> impl Strategy<Value = ResponseBody> {
    prop_oneof![
        any::<u64>().prop_map(ResponseBody::Seq),
        inode().prop_map(ResponseBody::Inode),
        (
            prop::collection::vec((text(), inode()), 0..3),
            prop::option::of(text())
        )
            .prop_map(|(entries, next_start_after)| ResponseBody::Page(ListPage {
                entries: entries
                    .into_iter()
                    .map(|(name, inode)| DirEntry {
                        name: name.into(),
                        inode
                    })
                    .collect(),
                next_start_after: next_start_after.map(Into::into),
            })),
        stream_item().prop_map(ResponseBody::Item),
        prop::collection::vec((text(), cursor_state(), any::<u64>()), 0..3).prop_map(|cs| {
            ResponseBody::Cursors(
                cs.into_iter()
                    .map(|(name, state, lag)| CursorInfo { name, state, lag })
                    .collect(),
            )
        }),
        Just(ResponseBody::Done),
        Just(ResponseBody::StreamEnd),
        (error_kind(), text()).prop_map(|(kind, message)| ResponseBody::Error { kind, message }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(committed_seq, log_start, log_bytes)| ResponseBody::Info {
                committed_seq,
                log_start,
                log_bytes,
            }
        ),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(id, manifest)| ResponseBody::Backup { id, manifest }),
        (
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..64),
            any::<u32>()
        )
            .prop_map(|(offset, data, crc32c)| ResponseBody::Chunk {
                offset,
                data,
                crc32c
            }),
    ]
}

pub(crate) fn server_msg() -> impl Strategy<Value = ServerMsg> {
    prop_oneof![
        1 => (any::<u16>(), text(), any::<u64>(), any::<u32>()).prop_map(
            |(version, server, committed_seq, max_frame)| ServerMsg::Welcome {
                version,
                server,
                committed_seq,
                max_frame,
            }
        ),
        4 => (any::<u64>(), response_body()).prop_map(|(id, body)| ServerMsg::Response { id, body }),
        1 => (error_kind(), text()).prop_map(|(kind, message)| ServerMsg::Fatal { kind, message }),
    ]
}

/// A message's frame payload (the encoding without its length prefix).
pub(crate) fn payload<T: serde::Serialize>(m: &T) -> Vec<u8> {
    protocol::encode(m).unwrap()[4..].to_vec()
}

/// Log values whose payload (not the envelope) was mutated, with the
/// checksum recomputed: the postcard decoder behind a valid envelope.
pub(crate) fn resealed_record() -> impl Strategy<Value = Vec<u8>> {
    let valid = record().prop_map(|r| encode_record(&r).unwrap()).boxed();
    (
        valid.clone(),
        valid,
        prop::collection::vec(mutation(), 1..5),
    )
        .prop_map(|(b, other, muts)| {
            let header = b[..ENVELOPE_HEADER_LEN].to_vec();
            let body = apply(
                b[ENVELOPE_HEADER_LEN..].to_vec(),
                &other[ENVELOPE_HEADER_LEN..],
                &muts,
            );
            seal(&header[..2], &body)
        })
}

pub(crate) fn seal(version: &[u8], payload: &[u8]) -> Vec<u8> {
    let crc = crc32c::crc32c_append(crc32c::crc32c(version), payload);
    let mut out = version.to_vec();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}
