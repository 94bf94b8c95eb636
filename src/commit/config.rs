//! How the writer commits: durability, group sizes, per-command limits.

/// Whether a group's log write is fsynced before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Durability {
    /// fsync (the WAL) before acknowledging: acknowledged writes survive a
    /// power loss.
    #[default]
    Sync,
    /// No fsync: acknowledged writes survive a process crash (they are in
    /// the OS page cache) but not a power loss. For tests and bulk loads.
    None,
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub durability: Durability,
    /// Most commands in one group.
    pub max_group_commands: usize,
    /// Most (approximate) command bytes in one group.
    pub max_group_bytes: usize,
    /// Most inodes one recursive delete removes; a bigger subtree is
    /// refused (`InvalidArgument`) and must be deleted in parts. Its record
    /// holds one event of ~100–200 bytes per inode, built in memory,
    /// written as one batch and sent to every subscriber whole.
    pub max_delete_inodes: usize,
    /// Most bytes of one command's log record; a command whose events
    /// would take more (a recursive delete of many long paths) is refused
    /// (`InvalidArgument`) and writes nothing.
    pub max_record_bytes: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            durability: Durability::Sync,
            max_group_commands: 1024,
            max_group_bytes: 4 << 20,
            max_delete_inodes: crate::engine::DEFAULT_MAX_DELETE_INODES,
            max_record_bytes: crate::engine::DEFAULT_MAX_RECORD_BYTES,
        }
    }
}
