//! The process groups of the `--image-launcher`s running now. Each launcher
//! leads a group of its own (what it starts on this host is in it), so
//! stopping an image, the launcher's end and the server's end reach all of
//! it. A server killed outright cannot: then the kernel tells the launcher
//! (its parent-death signal, set in [`dies_with_server`]), and the launcher
//! stops what it started.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::MutexExt;

/// The launchers not reaped yet, by pid (= their group's id). A pid in here
/// is still ours: its process, a zombie at worst, holds the number.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// How long the server's end waits for its launchers to clean up after
/// SIGTERM before it kills their groups.
const END_GRACE: Duration = Duration::from_secs(5);

pub(super) fn register(pid: i32) {
    RUNNING.guard().insert(pid);
}

pub(super) fn unregister(pid: i32) {
    RUNNING.guard().remove(&pid);
}

/// Sends `signal` to the launcher's process group.
pub(super) fn signal_group(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) on a process group the server made (the launcher's
    // pid, not reaped yet or just reaped: see the callers).
    unsafe { libc::kill(-pid, signal) };
}

/// Sets the launcher's process group (its own) and its parent-death signal:
/// SIGTERM, the launcher's signal to stop its image and clean up, when the
/// server dies, however it dies. The signal follows the thread that spawns
/// the launcher: a runtime worker thread, which lives as long as the server.
pub(super) fn dies_with_server(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
    let server = std::process::id();
    // SAFETY: prctl(2) and getppid(2) are async-signal-safe; the closure
    // allocates nothing on success.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The server may have died before the signal was set.
            if libc::getppid() as u32 != server {
                return Err(std::io::Error::other("the server has exited"));
            }
            Ok(())
        });
    }
}

/// Ends every launcher still running (starting an image, or serving one)
/// and what it started: SIGTERM to their process groups, SIGKILL to those
/// not gone after a grace period. For the server's orderly end, inside
/// the runtime (the reapers see the launchers go).
pub async fn end_launchers() {
    let pids: Vec<i32> = RUNNING.guard().iter().copied().collect();
    if pids.is_empty() {
        return;
    }
    tracing::info!(launchers = pids.len(), "stopping the image launchers");
    for &pid in &pids {
        signal_group(pid, libc::SIGTERM);
    }
    let began = Instant::now();
    while began.elapsed() < END_GRACE && pids.iter().any(|p| RUNNING.guard().contains(p)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pid in RUNNING.guard().iter().copied() {
        tracing::warn!(pid, "image launcher still running after SIGTERM: killed");
        signal_group(pid, libc::SIGKILL);
    }
}
