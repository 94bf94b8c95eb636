//! Directory listings for readdir: the server's pages, one at a time per
//! open directory, whatever the directory's size. The FUSE offset is an
//! entry's position in the listing (`.` 0, `..` 1, then the entries); the
//! handle keeps the page it is in and the name to list after, so that
//! reading on resumes by name (entries created or removed meanwhile never
//! make one appear twice), and a seek elsewhere lists again from the start.

use treelog_client::Client;
use treelog_proto::error::Result;
use treelog_proto::types::DirEntry;
use treelog_proto::ByteString;

/// Entries asked of the server at a time.
pub(crate) const PAGE: u32 = 1024;

/// The position of the first real entry (after `.` and `..`).
pub(crate) const FIRST: u64 = 2;

#[derive(Default)]
pub(crate) struct DirHandle {
    /// The page held, and the position of its first entry.
    page: Vec<DirEntry>,
    start: u64,
    /// Where the next page starts (`None` with `last`: no more).
    after: Option<ByteString>,
    last: bool,
    loaded: bool,
}

impl DirHandle {
    /// The entries from position `pos` (≥ `FIRST`) on, as far as the held
    /// page goes, fetching the page that holds `pos` first; empty at the
    /// end of the directory.
    pub(crate) async fn entries_from(
        &mut self,
        client: &Client,
        path: &[u8],
        pos: u64,
    ) -> Result<&[DirEntry]> {
        let end = |h: &DirHandle| h.start + h.page.len() as u64;
        if !self.loaded || pos < self.start {
            self.fetch(client, path, None, FIRST).await?;
        }
        while pos >= end(self) && !self.last {
            let after = self.after.take();
            let start = end(self);
            self.fetch(client, path, after, start).await?;
        }
        let skip = pos.saturating_sub(self.start) as usize;
        Ok(self.page.get(skip..).unwrap_or(&[]))
    }

    async fn fetch(
        &mut self,
        client: &Client,
        path: &[u8],
        after: Option<ByteString>,
        start: u64,
    ) -> Result<()> {
        let page = client.list(path, after.as_deref(), PAGE).await?;
        self.page = page.entries;
        self.start = start;
        self.last = page.next_start_after.is_none();
        self.after = page.next_start_after;
        self.loaded = true;
        Ok(())
    }
}
