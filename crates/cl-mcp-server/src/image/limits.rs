//! Resource limits of local images: how many images may run
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

use super::ImageError;

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

/// A cgroup made for one image: the child joins it by writing `0` into
/// `procs`, a descriptor the server opened.
pub struct ImageCgroup {
    pub dir: PathBuf,
    procs: OwnedFd,
}

/// What the child does between fork and exec (plain data, so the
/// `pre_exec` closure owns nothing).
#[derive(Clone, Copy, Debug)]
pub enum ChildCap {
    /// Write `0` (this process) into a cgroup's `cgroup.procs`.
    JoinCgroup(RawFd),
    /// Lower `RLIMIT_NPROC` to this.
    Rlimit(u64),
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

/// The caps prepared for one image, and how they read in `image-info`.
pub struct PreparedCaps {
    /// The image's cgroups (one per hierarchy: cgroup v1 mounts each
    /// controller apart, v2 has one cgroup for both).
    pub cgroups: Vec<ImageCgroup>,
    /// `RLIMIT_NPROC` for the child, when no pids cgroup could be made.
    pub nproc: Option<u64>,
    /// `processes: ...` and, with a memory cap asked for, `memory: ...`.
    pub lines: Vec<String>,
    /// Why a cap asked for does not apply.
    pub warning: Option<String>,
}

impl PreparedCaps {
    /// What the child must do; the descriptors stay open while `self` lives.
    pub fn child_steps(&self) -> Vec<ChildCap> {
        let mut steps: Vec<ChildCap> = self
            .cgroups
            .iter()
            .map(|c| ChildCap::JoinCgroup(c.procs.as_raw_fd()))
            .collect();
        steps.extend(self.nproc.map(ChildCap::Rlimit));
        steps
    }

    /// The cgroups' directories, to check and clean up after the image.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.cgroups.iter().map(|c| c.dir.clone()).collect()
    }
}

static CGROUP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Prepares the caps for an image about to be started: `max_processes`
/// processes and threads (`None`: `--max-processes 0`), and `memory_bytes`
/// for the image and everything it starts (`None`: no `--memory-limit`;
/// only where a memory cgroup can be made).
pub fn prepare_caps(max_processes: Option<u32>, memory_bytes: Option<u64>) -> PreparedCaps {
    // (controller, v1 file, v2 file, value)
    let mut wants: Vec<(&str, &str, &str, String)> = Vec::new();
    if let Some(n) = max_processes {
        wants.push(("pids", "pids.max", "pids.max", n.to_string()));
    }
    if let Some(b) = memory_bytes {
        wants.push((
            "memory",
            "memory.limit_in_bytes",
            "memory.max",
            b.to_string(),
        ));
    }
    // Group by hierarchy: one cgroup per base directory, with its settings
    // (file, value) and the controllers they serve.
    type Group<'a> = (PathBuf, Vec<(&'a str, String)>, Vec<&'a str>);
    let mut groups: Vec<Group> = Vec::new();
    let mut errors: Vec<(&str, ImageError)> = Vec::new();
    for (ctrl, v1, v2, value) in &wants {
        match controller_base(ctrl) {
            Ok((base, is_v2)) => {
                let file = if is_v2 { *v2 } else { *v1 };
                match groups.iter_mut().find(|(b, _, _)| *b == base) {
                    Some((_, settings, ctrls)) => {
                        settings.push((file, value.clone()));
                        ctrls.push(ctrl);
                    }
                    None => groups.push((base, vec![(file, value.clone())], vec![ctrl])),
                }
            }
            Err(e) => errors.push((ctrl, e)),
        }
    }
    let mut cgroups = Vec::new();
    let mut made: Vec<(&str, PathBuf)> = Vec::new();
    for (base, settings, ctrls) in groups {
        match make_cgroup(&base, &settings) {
            Ok(cg) => {
                made.extend(ctrls.iter().map(|c| (*c, cg.dir.clone())));
                cgroups.push(cg);
            }
            Err(e) => errors.extend(ctrls.iter().map(|c| (*c, e.clone()))),
        }
    }
    let made_for = |ctrl: &str| {
        made.iter()
            .find(|(c, _)| *c == ctrl)
            .map(|(_, d)| d.clone())
    };
    let error_for = |ctrl: &str| {
        errors
            .iter()
            .find(|(c, _)| *c == ctrl)
            .map(|(_, e)| e.to_string())
            .unwrap_or_default()
    };
    let mut lines = Vec::new();
    let mut warning = None;
    let mut nproc = None;
    match (max_processes, made_for("pids")) {
        (None, _) => lines.push("processes: no cap (--max-processes 0)".to_string()),
        (Some(max), Some(dir)) => lines.push(format!(
            "processes: at most {max} processes and threads (cgroup pids.max, {})",
            dir.display()
        )),
        (Some(max), None) => {
            let (line, w, limit) = nproc_fallback(max, &error_for("pids"));
            lines.push(line);
            warning = w;
            nproc = limit;
        }
    }
    if let Some(bytes) = memory_bytes {
        let mib = bytes / (1024 * 1024);
        lines.push(match made_for("memory") {
            Some(dir) => format!(
                "memory: the image and every process it starts at most {mib} MiB together \
                 (cgroup {}, {})",
                if dir.join("memory.max").exists() {
                    "memory.max"
                } else {
                    "memory.limit_in_bytes"
                },
                dir.display()
            ),
            None => format!(
                "memory: processes the image starts are not capped (no writable memory \
                 cgroup: {})",
                error_for("memory")
            ),
        });
    }
    PreparedCaps {
        cgroups,
        nproc,
        lines,
        warning,
    }
}

/// `--max-processes max` without a pids cgroup (`why`): `RLIMIT_NPROC` at
/// the user's tasks now plus `max`, within the server's own limit (root
/// ignores it). The `limits:` line, the warning if any, and the limit.
fn nproc_fallback(max: u32, why: &str) -> (String, Option<String>, Option<u64>) {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        let w = format!(
            "--max-processes {max} is NOT enforced: no writable cgroup with the pids \
             controller ({why}), and root ignores RLIMIT_NPROC"
        );
        return (format!("processes: {w}"), Some(w), None);
    }
    let now = user_tasks(uid);
    let wanted = now + u64::from(max);
    let (soft, hard) = own_nproc_limit();
    // A process may not raise its hard limit: asking for more
    // than ours would make every start fail (EPERM between
    // fork and exec). Nor is our own soft limit loosened. And the
    // kernel counts the server's tasks and the image's together: an
    // image allowed the server's own limit could take the last task the
    // server needs to answer (a thread of its blocking pool), so it gets
    // SERVER_RESERVE fewer.
    let limit = wanted
        .min(soft.saturating_sub(SERVER_RESERVE))
        .min(hard.saturating_sub(SERVER_RESERVE));
    if limit < wanted {
        let w = format!(
            "--max-processes {max}: the image gets RLIMIT_NPROC {limit}, the server's \
             own limit (soft {}, hard {}) less {SERVER_RESERVE} kept for the server, below \
             your {now} tasks + {max}{}",
            rlim_text(soft),
            rlim_text(hard),
            if limit <= now {
                ": your user already runs that many tasks, so the image may fail to \
                 start threads or programs"
            } else {
                ""
            }
        );
        (format!("processes: {w}"), Some(w), Some(limit))
    } else {
        (
            format!(
                "processes: RLIMIT_NPROC {limit} (your {now} tasks at start + {max}; no \
                 writable pids cgroup: {why})"
            ),
            None,
            Some(limit),
        )
    }
}

/// Tasks of the user kept for the server below its own `RLIMIT_NPROC` when
/// the image's limit is one too (its blocking threads, the programs it
/// runs for an image).
const SERVER_RESERVE: u64 = 8;

/// This process's `RLIMIT_NPROC` (soft, hard); `u64::MAX` for unlimited.
fn own_nproc_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut lim) } != 0 {
        return (u64::MAX, u64::MAX);
    }
    // rlim_t is u64 on Linux; RLIM_INFINITY is its maximum.
    let value = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    (value(lim.rlim_cur), value(lim.rlim_max))
}

fn rlim_text(v: u64) -> String {
    if v == u64::MAX {
        "unlimited".into()
    } else {
        v.to_string()
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

/// The directory of our own cgroup in a hierarchy with `ctrl` (`pids`,
/// `memory`), from `/proc/self/mountinfo` and `/proc/self/cgroup`, and
/// whether it is cgroup v2.
fn controller_base(ctrl: &str) -> Result<(PathBuf, bool), ImageError> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| ImageError::Cgroup(e.to_string()))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| ImageError::Cgroup(e.to_string()))?;
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
                fstype == "cgroup" && superopts.split(',').any(|o| o == ctrl)
            };
            ok.then(|| PathBuf::from(point))
        })
    };
    // v1: "N:pids:/path"; v2: "0::/path".
    if let Some(path) = cgroups.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls.split(',').any(|c| c == ctrl).then_some(path)
    }) {
        if let Some(mount) = mount_of(false) {
            let dir = mount.join(path.trim_start_matches('/'));
            // Inside a cgroup namespace the mount may already be our cgroup.
            return Ok((if dir.is_dir() { dir } else { mount }, false));
        }
    }
    if let Some(path) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) {
        if let Some(mount) = mount_of(true) {
            let dir = mount.join(path.trim_start_matches('/'));
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if enabled.split_whitespace().any(|c| c == ctrl) {
                return Ok((dir, true));
            }
            return Err(ImageError::Cgroup(format!(
                "the {ctrl} controller is not enabled for children of {}",
                dir.display()
            )));
        }
    }
    Err(ImageError::Cgroup(format!(
        "no cgroup hierarchy with the {ctrl} controller is mounted"
    )))
}

/// Creates the image's cgroup `cl-mcp-server/<server pid>-<n>` under
/// `base` with `settings` (file, value), removing the ones left by servers
/// that are gone.
fn make_cgroup(base: &Path, settings: &[(&str, String)]) -> Result<ImageCgroup, ImageError> {
    let base = base.join("cl-mcp-server");
    match std::fs::create_dir(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(ImageError::Cgroup(format!(
                "cannot create {}: {e}",
                base.display()
            )))
        }
    }
    remove_stale(&base);
    let n = CGROUP_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)
        .map_err(|e| ImageError::Cgroup(format!("cannot create {}: {e}", dir.display())))?;
    let setup = || -> Result<OwnedFd, ImageError> {
        for (file, value) in settings {
            std::fs::write(dir.join(file), value).map_err(|e| {
                ImageError::Cgroup(format!("cannot set {}/{file}: {e}", dir.display()))
            })?;
        }
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| {
                ImageError::Cgroup(format!("cannot open {}/cgroup.procs: {e}", dir.display()))
            })?;
        Ok(procs.into())
    };
    match setup() {
        Ok(procs) => Ok(ImageCgroup { dir, procs }),
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
        if try_release_cgroup(&dir) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tracing::warn!(cgroup = %dir.display(), "could not remove the image's cgroup");
}

/// [`release_cgroup`] for a blocking caller (a process the server ran for
/// an image and waited for: `image/jail.rs`).
pub fn release_cgroup_blocking(dir: &Path) {
    for _ in 0..50 {
        if try_release_cgroup(dir) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    tracing::warn!(cgroup = %dir.display(), "could not remove a cgroup");
}

/// Kills what is left in the cgroup `dir` and removes it; true once it is gone.
fn try_release_cgroup(dir: &Path) -> bool {
    kill_members(dir);
    if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
        // The shared `cl-mcp-server` parent too, once no image uses it
        // (refused while another image's cgroup is in it).
        if let Some(base) = dir.parent() {
            let _ = std::fs::remove_dir(base);
        }
        return true;
    }
    false
}

/// Whether the kernel's OOM killer killed a process of the cgroup `dir`
/// at its memory cap (`oom_kill` in cgroup v2's `memory.events`, or v1's
/// `memory.oom_control`).
pub fn oom_killed(dir: &Path) -> bool {
    ["memory.events", "memory.oom_control"].iter().any(|f| {
        std::fs::read_to_string(dir.join(f))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    })
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
    fn an_oom_kill_is_read_from_either_cgroup_version() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert!(!oom_killed(d));
        std::fs::write(
            d.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n",
        )
        .unwrap();
        assert!(!oom_killed(d));
        std::fs::write(d.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        assert!(oom_killed(d));
        std::fs::remove_file(d.join("memory.events")).unwrap();
        std::fs::write(
            d.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert!(oom_killed(d));
    }

    #[test]
    fn no_cap_when_off() {
        let p = prepare_caps(None, None);
        assert!(p.cgroups.is_empty() && p.nproc.is_none());
        assert_eq!(p.lines, vec!["processes: no cap (--max-processes 0)"]);
    }
}
