//! [`Treelog`]'s mutations: each a command for the single writer, answered
//! with the sequence of its log record once it is durable and applied.

use crate::command::Command;
use crate::commit::request::Work;
use crate::error::Result;
use crate::treelog::{CreateOptions, MkdirOptions, PendingCommit, SetAttrs, Treelog};
use crate::types::XattrFlag;
use treelog_proto::caller::Caller;

impl Treelog {
    /// Submits a command and blocks until it is committed or refused.
    /// Returns the sequence number of its record (for a no-op, the committed
    /// sequence it was decided against).
    pub fn submit(&self, cmd: Command) -> Result<u64> {
        self.check_leader()?;
        self.writer.send(Work::Command(cmd, None))
    }

    /// Queues a command without waiting for it (pipelining); commands from
    /// one thread are executed in the order they were queued. Blocks only
    /// while the queue is full.
    pub fn submit_pipelined(&self, cmd: Command) -> Result<PendingCommit> {
        self.check_leader()?;
        let rx = self.writer.queue(Work::Command(cmd, None))?;
        Ok(PendingCommit { rx })
    }

    /// Submits a command from async code without blocking the runtime.
    pub async fn submit_async(&self, cmd: Command) -> Result<u64> {
        self.submit_as(cmd, None).await
    }

    /// [`Treelog::submit_async`] for a user: with `caller`, the writer
    /// checks the command with POSIX's permission rules as that user
    /// (docs/SECURITY.md, "Permissions") and gives a new entry that
    /// user's owner and group (or a setgid parent's group).
    pub async fn submit_as(&self, cmd: Command, caller: Option<Caller>) -> Result<u64> {
        self.check_leader()?;
        if let Some(c) = &caller {
            c.validate()?;
        }
        self.writer
            .send_async(Work::Command(cmd, caller.map(Box::new)))
            .await
    }

    pub fn mkdir(&self, path: impl AsRef<[u8]>, o: MkdirOptions) -> Result<u64> {
        self.submit(Command::Mkdir {
            path: path.as_ref().into(),
            parents: o.parents,
            mode: o.mode,
            owner: o.owner,
            group: o.group,
        })
    }

    /// `mkdir -p` with default attributes.
    pub fn mkdir_p(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.mkdir(
            path,
            MkdirOptions {
                parents: true,
                ..Default::default()
            },
        )
    }

    pub fn create(&self, path: impl AsRef<[u8]>, o: CreateOptions) -> Result<u64> {
        self.submit(Command::Create {
            path: path.as_ref().into(),
            parents: o.parents,
            mode: o.mode,
            owner: o.owner,
            group: o.group,
            block_size: o.block_size,
        })
    }

    pub fn complete(&self, path: impl AsRef<[u8]>, size: u64) -> Result<u64> {
        self.submit(Command::Complete {
            path: path.as_ref().into(),
            size,
        })
    }

    pub fn set_size(&self, path: impl AsRef<[u8]>, size: u64) -> Result<u64> {
        self.submit(Command::SetSize {
            path: path.as_ref().into(),
            size,
        })
    }

    pub fn set_attrs(&self, path: impl AsRef<[u8]>, a: SetAttrs) -> Result<u64> {
        self.submit(Command::SetAttr {
            path: path.as_ref().into(),
            mode: a.mode,
            owner: a.owner,
            group: a.group,
            mtime_ms: a.mtime_ms,
        })
    }

    pub fn delete(&self, path: impl AsRef<[u8]>, recursive: bool) -> Result<u64> {
        self.submit(Command::Delete {
            path: path.as_ref().into(),
            recursive,
        })
    }

    pub fn rename(
        &self,
        src: impl AsRef<[u8]>,
        dst: impl AsRef<[u8]>,
        overwrite: bool,
    ) -> Result<u64> {
        self.submit(Command::Rename {
            src: src.as_ref().into(),
            dst: dst.as_ref().into(),
            overwrite,
        })
    }

    /// `ln -s TARGET PATH`: a symbolic link (see [`Command::Symlink`]).
    pub fn symlink(
        &self,
        target: impl AsRef<[u8]>,
        path: impl AsRef<[u8]>,
        o: MkdirOptions,
    ) -> Result<u64> {
        self.submit(Command::Symlink {
            target: target.as_ref().into(),
            path: path.as_ref().into(),
            parents: o.parents,
            owner: o.owner,
            group: o.group,
        })
    }

    /// Sets an extended attribute (see [`Command::SetXattr`]).
    pub fn set_xattr(
        &self,
        path: impl AsRef<[u8]>,
        name: &str,
        value: &[u8],
        flag: XattrFlag,
    ) -> Result<u64> {
        self.submit(Command::SetXattr {
            path: path.as_ref().into(),
            name: name.to_owned(),
            value: value.to_vec().into(),
            flag,
        })
    }

    pub fn remove_xattr(&self, path: impl AsRef<[u8]>, name: &str) -> Result<u64> {
        self.submit(Command::RemoveXattr {
            path: path.as_ref().into(),
            name: name.to_owned(),
        })
    }

    /// Gives the directory `path` a quota, or changes its limits (see
    /// [`Command::SetQuota`]).
    pub fn set_quota(
        &self,
        path: impl AsRef<[u8]>,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<u64> {
        self.submit(Command::SetQuota {
            path: path.as_ref().into(),
            inodes,
            bytes,
        })
    }

    pub fn clear_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.submit(Command::ClearQuota {
            path: path.as_ref().into(),
        })
    }

    /// Counts the quota of `path` again (see [`Command::RecountQuota`]).
    pub fn recount_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.submit(Command::RecountQuota {
            path: path.as_ref().into(),
        })
    }
}
