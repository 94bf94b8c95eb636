//! The calling thread's scheduling class (Linux): background work (a
//! backup's copy) runs at `SCHED_IDLE`. Best effort: a refusal leaves the
//! thread as it was.

/// Puts the calling thread under `policy` (`libc::SCHED_IDLE`, ...) at
/// static priority 0.
#[cfg(target_os = "linux")]
pub(crate) fn set_policy(policy: libc::c_int) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a plain syscall on the calling thread (pid 0); `param`
    // outlives it.
    let _ = unsafe { libc::sched_setscheduler(0, policy, &param) };
}
