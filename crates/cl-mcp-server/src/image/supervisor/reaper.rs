//! The reaper of a local image's process: waits for it to end (or kills
//! it when asked), then says how it ended.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::image::last_words::describe_exit;
use crate::image::limits;

use super::launcher_groups;

/// Waits for the image's process to end (or kills it when asked), then
/// reports how it ended, after its last words are read, its cgroups
/// released and its `--max-images` place freed.
pub(super) struct Reaper {
    pub(super) child: tokio::process::Child,
    /// Holding stdin keeps the image alive; it exits at EOF.
    pub(super) stdin: Option<tokio::process::ChildStdin>,
    pub(super) pid: Option<u32>,
    pub(super) cgroups: Vec<PathBuf>,
    pub(super) memory_limit_mb: Option<u64>,
    pub(super) permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The stdout and stderr readers.
    pub(super) pumps: [JoinHandle<()>; 2],
    /// An `--image-launcher`'s time to clean up when asked to stop: its
    /// stdin is closed and it gets SIGTERM, and SIGKILL only after this.
    /// `None` (a local image): SIGKILL after a moment. A launcher leads a
    /// process group of its own (`launcher_groups`): the signals go to the
    /// group, and what is left of it once the launcher has exited is killed.
    pub(super) grace: Option<Duration>,
}

impl Reaper {
    /// Starts watching: the exit's description arrives on the receiver; the
    /// sender asks for the process to be killed.
    pub(super) fn spawn(self) -> (watch::Receiver<Option<String>>, oneshot::Sender<()>) {
        let (exit_tx, exit_rx) = watch::channel(None);
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        tokio::spawn(self.watch(kill_rx, exit_tx));
        (exit_rx, kill_tx)
    }

    async fn watch(self, kill_rx: oneshot::Receiver<()>, exit_tx: watch::Sender<Option<String>>) {
        let Reaper {
            mut child,
            stdin,
            pid,
            cgroups,
            memory_limit_mb,
            permit,
            pumps,
            grace,
        } = self;
        let mut stdin = stdin;
        let group = pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|_| grace.is_some());
        let (status, killed) = tokio::select! {
            s = child.wait() => (s, false),
            _ = kill_rx => match grace {
                Some(wait) => {
                    drop(stdin.take());
                    // Not reaped yet: the group is still ours.
                    if let Some(pid) = group {
                        launcher_groups::signal_group(pid, libc::SIGTERM);
                    }
                    stop_within(&mut child, wait, group).await
                }
                // It may be ending on its own (killed from outside, say):
                // a dying process's socket closes before its exit status
                // can be collected, so give it a moment before killing it.
                None => stop_within(&mut child, Duration::from_millis(250), None).await,
            },
        };
        if let Some(pid) = group {
            // What the launcher left running ends with it. Its pid, just
            // reaped, still names the group while a member is left.
            launcher_groups::signal_group(pid, libc::SIGKILL);
            launcher_groups::unregister(pid);
        }
        let text = match status {
            // Asked for when the image is stopped on purpose, or when
            // its connection is gone (the process could still run).
            Ok(s) if killed && s.code().is_none() => {
                "killed by the server (SIGKILL) once its Swank connection was gone".into()
            }
            Ok(s) => exit_text(s, &cgroups, memory_limit_mb),
            Err(e) => format!("wait failed: {e}"),
        };
        // The Lisp's last words (SBCL's backtrace is flushed at exit)
        // are read before the death is reported; a child the image left
        // running may hold the pipes open, so not for long.
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            for pump in pumps {
                let _ = pump.await;
            }
        })
        .await;
        tracing::info!(pid, status = %text, "Lisp image exited");
        // What it left running dies with it; its place (--max-images)
        // is free once it is gone.
        for dir in cgroups {
            limits::release_cgroup(dir).await;
        }
        drop(permit);
        let _ = exit_tx.send(Some(text));
    }
}

/// The process's exit within `wait`, else after SIGKILL (then `true`), to
/// its process `group` too when it leads one.
async fn stop_within(
    child: &mut tokio::process::Child,
    wait: Duration,
    group: Option<i32>,
) -> (std::io::Result<std::process::ExitStatus>, bool) {
    match tokio::time::timeout(wait, child.wait()).await {
        Ok(s) => (s, false),
        Err(_) => {
            if let Some(pid) = group {
                launcher_groups::signal_group(pid, libc::SIGKILL);
            }
            let _ = child.start_kill();
            (child.wait().await, true)
        }
    }
}

/// How the process ended, in words; a SIGKILL from the memory cgroup's
/// OOM killer is the `--memory-limit` cap (ECL reports nothing itself).
fn exit_text(
    s: std::process::ExitStatus,
    cgroups: &[PathBuf],
    memory_limit_mb: Option<u64>,
) -> String {
    let mut text = describe_exit(s);
    if s.signal() == Some(libc::SIGKILL) && cgroups.iter().any(|d| limits::oom_killed(d)) {
        text.push_str(&format!(
            ": the kernel's OOM killer, at the image's memory cap (--memory-limit \
             {} MB: the image and what it starts)",
            memory_limit_mb.unwrap_or_default()
        ));
    }
    text
}
