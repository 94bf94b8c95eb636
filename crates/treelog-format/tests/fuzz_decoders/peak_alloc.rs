//! A global allocator that measures the peak of live bytes a call allocates on
//! its thread. Per thread, so that the tests running beside it do not count;
//! every decoder here runs synchronously on the caller's thread.

use super::*;

pub(crate) struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

pub(crate) fn note(delta: isize) {
    // `try_with`: allocations also happen while a thread is torn down.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let live = LIVE.get() + delta;
            LIVE.set(live);
            if live > PEAK.get() {
                PEAK.set(live);
            }
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize));
        System.dealloc(p, l)
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, l, new_size);
        if !q.is_null() {
            // Counted as a copy: old and new blocks both live at the peak.
            note(new_size as isize);
            note(-(l.size() as isize));
        }
        q
    }
}

#[global_allocator]
pub(crate) static ALLOC: Counting = Counting;

/// Runs `f` and returns its result and the peak of bytes it held allocated
/// at once (the result included).
pub(crate) fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.set(0);
    PEAK.set(0);
    ARMED.set(true);
    let r = f();
    ARMED.set(false);
    (r, PEAK.get().max(0) as usize)
}

/// Small allocations every decoder may make on any input: its error
/// message, a few strings.
pub(crate) const SLACK: usize = 4 << 10;

/// serde preallocates a sequence from its announced length, capped at
/// 1 MiB (and postcard announces no length the remaining input cannot
/// hold), so a decoded message may transiently hold that much beyond what
/// it decodes.
pub(crate) const SERDE_PREALLOC: usize = 1 << 20;

/// Bytes of memory a decoded message may hold per byte of its encoding:
/// postcard packs a `u64` or an empty string into one byte, which becomes
/// 8 or 24 bytes in memory, and an event shared in an `Arc` is one boxed
/// allocation each, copied once when a `Vec` becomes an `Arc<[_]>`.
pub(crate) const MESSAGE_BYTES_PER_INPUT_BYTE: usize = 64;

pub(crate) fn message_bound(input: usize) -> usize {
    SERDE_PREALLOC + MESSAGE_BYTES_PER_INPUT_BYTE * input + SLACK
}
