//! The calling thread's scheduling class (Linux; elsewhere a no-op): the
//! change-stream delivery thread runs at `SCHED_IDLE` or a niceness, the
//! request workers optionally at `SCHED_BATCH`. Best effort: a refusal
//! leaves the thread as it was.

/// Puts the calling thread under `policy` (`libc::SCHED_IDLE`,
/// `libc::SCHED_BATCH`, ...) at static priority 0.
#[cfg(target_os = "linux")]
pub(crate) fn set_policy(policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain syscall on the calling thread (pid 0); `param`
    // outlives it.
    let _ = unsafe { libc::sched_setscheduler(0, policy, &param) };
}

/// Sets the calling thread's niceness (Linux: per thread).
#[cfg(target_os = "linux")]
pub(crate) fn set_niceness(n: i32) {
    // SAFETY: plain syscalls about the calling thread.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, n);
    }
}

/// The calling thread's policy and niceness (for the tests that check the
/// threads got theirs).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn current() -> (libc::c_int, i32) {
    // SAFETY: plain syscalls about the calling thread; errno is cleared
    // first because -1 is also a valid niceness.
    unsafe {
        let tid = libc::gettid();
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        (libc::sched_getscheduler(0), n)
    }
}
