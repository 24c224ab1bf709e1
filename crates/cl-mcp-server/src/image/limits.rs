//! Resource limits of local images (CONTRACT §10): how many images may run
//! at once (`--max-images`), and how many processes and threads one image
//! and everything it starts may have (`--max-processes`).
//!
//! The process cap, in order of preference:
//! 1. a cgroup of its own with `pids.max` (cgroup v1 `pids` hierarchy, or a
//!    cgroup v2 hierarchy where the server may create a child with the
//!    `pids` controller): exact, per image, counts the image's threads and
//!    every descendant, and lets the server kill leftovers when the image
//!    ends;
//! 2. otherwise, for a user other than root, `RLIMIT_NPROC`: the kernel
//!    counts every task (process or thread) of the real user, so the limit
//!    is set to the user's task count at spawn plus the cap;
//! 3. otherwise (root without a writable pids cgroup: root ignores
//!    `RLIMIT_NPROC`) no cap, said once in the log and in `image-info`.
//!
//! The child joins the cgroup (writes `0` to a `cgroup.procs` descriptor
//! the server opened) or lowers its limit between fork and exec, before
//! the sandbox is applied: plain system calls, no allocation.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `--max-images`: the local images that may run at once, server-wide.
/// Each running image holds a permit until its process has exited.
#[derive(Debug)]
pub struct ImageQuota {
    max: usize,
    permits: Arc<Semaphore>,
}

impl ImageQuota {
    pub fn new(max: usize) -> Arc<ImageQuota> {
        Arc::new(ImageQuota {
            max,
            permits: Arc::new(Semaphore::new(max)),
        })
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A permit for one more image, or `None` when `max` run already.
    pub fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// The images running now.
    pub fn in_use(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

/// How the process cap is enforced for one image.
pub enum ProcessCap {
    /// The image's own cgroup: the child writes `0` into `procs`.
    Cgroup { dir: PathBuf, procs: OwnedFd },
    /// `RLIMIT_NPROC` set to this many tasks of the user.
    Rlimit(u64),
}

/// What the child does between fork and exec (plain data, so the
/// `pre_exec` closure owns nothing).
#[derive(Clone, Copy, Debug)]
pub enum ChildCap {
    /// Write `0` (this process) into the cgroup's `cgroup.procs`.
    JoinCgroup(RawFd),
    /// Lower `RLIMIT_NPROC` to this.
    Rlimit(u64),
}

impl ProcessCap {
    /// What the child must do; the descriptor stays open while `self` lives.
    pub fn for_child(&self) -> ChildCap {
        match self {
            ProcessCap::Cgroup { procs, .. } => ChildCap::JoinCgroup(procs.as_raw_fd()),
            ProcessCap::Rlimit(n) => ChildCap::Rlimit(*n),
        }
    }

    /// The cgroup to clean up after the image (`None` for a limit).
    pub fn cgroup(&self) -> Option<&Path> {
        match self {
            ProcessCap::Cgroup { dir, .. } => Some(dir),
            ProcessCap::Rlimit(_) => None,
        }
    }
}

impl ChildCap {
    /// In the child, between fork and exec: join the cgroup or lower the
    /// limit. Only async-signal-safe system calls.
    pub fn apply_in_child(self) -> std::io::Result<()> {
        match self {
            ChildCap::JoinCgroup(fd) => {
                // SAFETY: write(2) of a static byte to a descriptor the
                // parent keeps open until the child has been spawned. A
                // refusal must not keep the image from starting: the
                // parent checks membership after the spawn
                // ([`in_cgroup`]) and reports an uncapped image.
                let _ = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            }
            ChildCap::Rlimit(n) => {
                let lim = libc::rlimit {
                    rlim_cur: n as libc::rlim_t,
                    rlim_max: n as libc::rlim_t,
                };
                // SAFETY: setrlimit(2) with a valid struct.
                if unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// The cap prepared for one image, and how it reads in `image-info`.
pub struct PreparedCap {
    pub cap: Option<ProcessCap>,
    pub describe: String,
    /// Why no cap applies although one was asked for.
    pub warning: Option<String>,
}

static CGROUP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Prepares the cap of `max` processes and threads for an image about to
/// be started (`None`: `--max-processes 0`, no cap).
pub fn prepare_cap(max: Option<u32>) -> PreparedCap {
    let Some(max) = max else {
        return PreparedCap {
            cap: None,
            describe: "processes: no cap (--max-processes 0)".into(),
            warning: None,
        };
    };
    let cgroup_error = match cgroup_cap(max) {
        Ok(cap) => {
            let dir = cap.cgroup().map(|d| d.display().to_string());
            return PreparedCap {
                cap: Some(cap),
                describe: format!(
                    "processes: at most {max} processes and threads (cgroup pids.max, {})",
                    dir.unwrap_or_default()
                ),
                warning: None,
            };
        }
        Err(e) => e,
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        let w = format!(
            "--max-processes {max} is NOT enforced: no writable cgroup with the pids controller \
             ({cgroup_error}), and root ignores RLIMIT_NPROC"
        );
        return PreparedCap {
            cap: None,
            describe: format!("processes: {w}"),
            warning: Some(w),
        };
    }
    let now = user_tasks(uid);
    let limit = now + u64::from(max);
    PreparedCap {
        cap: Some(ProcessCap::Rlimit(limit)),
        describe: format!(
            "processes: RLIMIT_NPROC {limit} (your {now} tasks at start + {max}; no writable pids cgroup: {cgroup_error})"
        ),
        warning: None,
    }
}

/// The tasks (processes and threads) whose real user is `uid`, as the
/// kernel counts them for `RLIMIT_NPROC`.
pub fn user_tasks(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        e.file_name().to_str()?.parse::<u32>().ok()?;
        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        (field("Uid:")? == u64::from(uid)).then(|| field("Threads:").unwrap_or(1))
    })
    .sum()
}

/// The directory of our own cgroup in a hierarchy with the `pids`
/// controller, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn pids_cgroup_dir() -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    // mountinfo: id parent major:minor root mountpoint options - fstype source superoptions
    let mount_of = |v2: bool| {
        mounts.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let superopts = r.nth(1).unwrap_or("");
            let point = left.split_whitespace().nth(4)?;
            let ok = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && superopts.split(',').any(|o| o == "pids")
            };
            ok.then(|| PathBuf::from(point))
        })
    };
    // v1: "N:pids:/path"; v2: "0::/path".
    if let Some(path) = cgroups.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrl.split(',').any(|c| c == "pids").then_some(path)
    }) {
        if let Some(mount) = mount_of(false) {
            let dir = mount.join(path.trim_start_matches('/'));
            // Inside a cgroup namespace the mount may already be our cgroup.
            return Ok(if dir.is_dir() { dir } else { mount });
        }
    }
    if let Some(path) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) {
        if let Some(mount) = mount_of(true) {
            let dir = mount.join(path.trim_start_matches('/'));
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if enabled.split_whitespace().any(|c| c == "pids") {
                return Ok(dir);
            }
            return Err(format!(
                "the pids controller is not enabled for children of {}",
                dir.display()
            ));
        }
    }
    Err("no cgroup hierarchy with the pids controller is mounted".into())
}

/// Creates the image's cgroup `cl-mcp-server/<server pid>-<n>` under ours
/// with `pids.max = max`, removing empty ones left by servers that are gone.
fn cgroup_cap(max: u32) -> Result<ProcessCap, String> {
    let base = pids_cgroup_dir()?.join("cl-mcp-server");
    match std::fs::create_dir(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", base.display())),
    }
    remove_stale(&base);
    let n = CGROUP_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let setup = || -> Result<OwnedFd, String> {
        std::fs::write(dir.join("pids.max"), max.to_string())
            .map_err(|e| format!("cannot set {}/pids.max: {e}", dir.display()))?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| format!("cannot open {}/cgroup.procs: {e}", dir.display()))?;
        Ok(procs.into())
    };
    match setup() {
        Ok(procs) => Ok(ProcessCap::Cgroup { dir, procs }),
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
    }
}

/// Removes the cgroups of servers that no longer run, killing what their
/// images left running there (orphans of a server that was killed).
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            kill_members(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// After the image exited: kills whatever it left running in its cgroup
/// (children of `run-program`, a fork bomb's remains) and removes the
/// cgroup.
pub async fn release_cgroup(dir: PathBuf) {
    for _ in 0..50 {
        kill_members(&dir);
        if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tracing::warn!(cgroup = %dir.display(), "could not remove the image's cgroup");
}

/// Whether process `pid` is in the cgroup `dir`.
pub fn in_cgroup(dir: &Path, pid: u32) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.trim().parse() == Ok(pid))
}

/// SIGKILL to every process in the cgroup `dir`.
fn kill_members(dir: &Path) {
    let pids = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        if pid > 0 {
            // SAFETY: kill(2) of a process in one of our images' cgroups.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_counts_permits() {
        let q = ImageQuota::new(2);
        let a = q.try_take().expect("first");
        let _b = q.try_take().expect("second");
        assert!(q.try_take().is_none());
        assert_eq!(q.in_use(), 2);
        drop(a);
        assert!(q.try_take().is_some());
    }

    #[test]
    fn counts_our_own_tasks() {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        // This test process has at least its main thread.
        assert!(user_tasks(uid) >= 1);
        assert_eq!(user_tasks(u32::MAX - 7), 0);
    }

    #[test]
    fn no_cap_when_off() {
        let p = prepare_cap(None);
        assert!(p.cap.is_none());
        assert!(p.describe.contains("no cap"));
    }
}
