//! Starting a local image, step by step: confine it ([`Image::confine`]),
//! cap it and build its command ([`Image::command`]), spawn it, watch its
//! exit ([`Reaper`], in `reaper.rs`), wait for its Swank port ([`Image::await_port`]),
//! connect and open its evaluation channel ([`connect_local`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use swank_client::{SwankClient, SwankEvent};
use tokio::sync::{mpsc, oneshot};

use crate::image::core_cache::{self, LaunchPlan};
use crate::image::direct::DirectChannel;
use crate::image::implementation::LispKind;
use crate::image::jail::Purpose;
use crate::image::last_words::{lisp_words, LastWords};
use crate::image::limits::{self, PreparedCaps};
use crate::image::places::ImagePlaces;
use crate::image::sandbox::{self, Confinement};
use crate::image::{ImageError, ImageMode};
use crate::sync::MutexExt;

use super::channel::open_direct;
use super::live::Live;
use super::log_pump::{log_stderr, log_stdout};
use super::reaper::Reaper;
use super::secret::random_secret;
use super::{Image, NoteLevel};

/// The sandbox's weakness on this kernel is logged once per process.
static SANDBOX_WARNING_LOGGED: AtomicBool = AtomicBool::new(false);
/// So is a process cap that cannot be enforced.
static CAP_WARNING_LOGGED: AtomicBool = AtomicBool::new(false);

impl Image {
    /// `start_local`, once more when the first start failed on a cached
    /// core that was found broken and discarded (that start rebuilds it).
    pub(super) async fn start_local_healing(
        &self,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        self.inner.cache_discarded.store(false, Ordering::SeqCst);
        let first = self.start_local(generation, permit).await;
        if first.is_ok() || !self.inner.cache_discarded.swap(false, Ordering::SeqCst) {
            return first;
        }
        // The failed image's place (--max-images) frees when its process
        // has been reaped: wait a moment for it.
        let mut permit = self.image_permit();
        for _ in 0..100 {
            if permit.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            permit = self.image_permit();
        }
        self.start_local(generation, permit?).await
    }

    async fn start_local(
        &self,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        let started = Instant::now();
        let plan = self.launch_plan().await?;
        let secret = random_secret()?;
        let (places, confinement) = self.confine(&plan)?;
        let (mut cmd, cap) = self.command(&plan, &confinement, &secret, &places);
        let image_nproc = cap.nproc;
        let cgroups = cap.dirs();
        let limits_text = self.limits_text(&plan, &cap.lines);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for dir in cgroups {
                    tokio::spawn(limits::release_cgroup(dir));
                }
                return Err(ImageError::StartFailed(format!(
                    "cannot run {}: {e}",
                    plan.lisp.display()
                )));
            }
        };
        // The child holds the ruleset now; ours closes here.
        let sandbox_report = confinement.report.clone();
        drop(confinement);
        // The cgroups' descriptors were needed only by the child.
        drop(cap);
        let pid = child.id();
        let limits_text = self.check_cgroups(&cgroups, pid, limits_text);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = Arc::new(LastWords::default());

        let (port_tx, port_rx) = oneshot::channel::<u16>();
        let out_done = tokio::spawn(log_stdout(stdout, pid, port_tx, tail.clone()));
        let err_done = tokio::spawn(log_stderr(stderr, pid, tail.clone()));

        let (exit_rx, kill_tx) = Reaper {
            child,
            stdin,
            pid,
            cgroups,
            memory_limit_mb: self.inner.config.memory_limit_mb,
            permit,
            pumps: [out_done, err_done],
            grace: None,
        }
        .spawn();
        let pending = Pending {
            kill: kill_tx,
            tail: tail.clone(),
            nproc: image_nproc,
        };
        let port = match self.await_port(port_rx, &plan).await {
            Ok(p) => p,
            Err(e) => return Err(pending.fail(e)),
        };
        let address = format!("127.0.0.1:{port}");
        let connected = match connect_local(&address, secret, &plan).await {
            Ok(c) => c,
            Err(e) => return Err(pending.fail(e)),
        };
        let live = Arc::new(Live {
            generation,
            mode: ImageMode::Local,
            client: connected.client,
            pid,
            worker: Mutex::new(connected.worker),
            direct: tokio::sync::Mutex::new(connected.direct.map(|(ch, _)| ch)),
            direct_thread: connected.direct_thread,
            direct_socket: connected.direct_socket,
            started_at: SystemTime::now(),
            core: plan.core.clone(),
            address,
            dead: AtomicBool::new(false),
            stopped_on_purpose: AtomicBool::new(false),
            exit: exit_rx,
            kill: Mutex::new(Some(pending.kill)),
            last_words: tail,
            kind: Some(plan.kind),
            sandbox: Some(sandbox_report),
            limits: Some(limits_text),
        });
        self.spawn_monitor(&live, connected.events);
        tracing::info!(
            pid,
            generation,
            from_core = plan.core.is_some(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Lisp image ready"
        );
        self.inner.note(
            NoteLevel::Info,
            format!(
                "Lisp image started (generation {generation}, pid {}, {}, {} ms)",
                pid.map_or_else(|| "?".to_string(), |p| p.to_string()),
                if plan.core.is_some() {
                    "from the cached core"
                } else {
                    "from source"
                },
                started.elapsed().as_millis()
            ),
        );
        Ok(live)
    }

    /// The image's places (its project's private fasl and temp
    /// directories among them) and the sandbox it will run in (its
    /// weakness on this kernel noted).
    fn confine(&self, plan: &LaunchPlan) -> Result<(ImagePlaces, Confinement), ImageError> {
        let image_places = self.image_places()?;
        let places = image_places.sandbox_places(&self.inner.config, &plan.lisp);
        let confinement = sandbox::prepare(&self.inner.config.sandbox, &places)
            .map_err(|e| ImageError::StartFailed(e.to_string()))?;
        if let Some(w) = &confinement.report.warning {
            if !SANDBOX_WARNING_LOGGED.swap(true, Ordering::SeqCst) {
                tracing::warn!(mode = confinement.report.mode.as_str(), "sandbox: {w}");
            }
            self.inner.note(NoteLevel::Warning, format!("sandbox: {w}"));
        }
        Ok((image_places, confinement))
    }

    /// The cache, the project root (now) and the project's private fasl,
    /// coverage and temp directories, made if missing.
    pub(super) fn image_places(&self) -> Result<ImagePlaces, ImageError> {
        crate::image::places::image_places(&self.inner.config)
    }

    /// `--memory-limit` for this Lisp: its arguments and its environment
    /// (set after `plan.env`, which would otherwise override it).
    pub(super) fn memory_settings(
        &self,
        plan: &LaunchPlan,
    ) -> (Vec<std::ffi::OsString>, Vec<(String, String)>) {
        let Some(mb) = self.inner.config.memory_limit_mb else {
            return (Vec::new(), Vec::new());
        };
        let current = plan
            .env
            .iter()
            .find(|(k, _)| k == "JDK_JAVA_OPTIONS")
            .map(|(_, v)| v.to_string())
            .or_else(|| std::env::var("JDK_JAVA_OPTIONS").ok());
        let mut env = plan.kind.memory_env(mb, current.as_deref());
        if plan.kind.soft_memory_limit() {
            env.push(("CL_MCP_MEMORY_LIMIT_MB".into(), mb.to_string()));
        }
        (plan.kind.memory_args(mb), env)
    }

    /// The image's command: its caps (processes, memory) and sandbox set
    /// in the child before it runs the Lisp, its arguments and environment.
    fn command(
        &self,
        plan: &LaunchPlan,
        confinement: &Confinement,
        secret: &str,
        places: &ImagePlaces,
    ) -> (tokio::process::Command, PreparedCaps) {
        let config = &self.inner.config;
        let mut cmd = tokio::process::Command::new(&plan.lisp);
        // The image's own heap, plus room for what it starts.
        let memory_cap = config
            .memory_limit_mb
            .map(|mb| (plan.kind.heap_mb(mb) + (mb / 2).max(512)) * 1024 * 1024);
        let cap = limits::prepare_caps(config.max_processes, memory_cap);
        if let Some(w) = &cap.warning {
            if !CAP_WARNING_LOGGED.swap(true, Ordering::SeqCst) {
                tracing::warn!("{w}");
            }
            self.inner.note(NoteLevel::Warning, w.clone());
        }
        for step in cap.child_steps() {
            // SAFETY: one system call (write or setrlimit), no allocation;
            // registered before the sandbox, which would refuse the write.
            unsafe {
                cmd.pre_exec(move || step.apply_in_child());
            }
        }
        if let Some(fd) = confinement.raw_fd() {
            let own_proc = confinement.own_proc();
            // SAFETY: the closure makes only system calls and allocates
            // nothing (async-signal-safe, as required after fork).
            unsafe {
                cmd.pre_exec(move || sandbox::restrict_in_child(fd, own_proc));
            }
        }
        if let Some(env) = sandbox::image_environment(confinement.report.mode) {
            cmd.env_clear().envs(env);
        }
        if places.temp != std::env::temp_dir() {
            // A private temp dir (the cache lies under the system's).
            cmd.env("TMPDIR", &places.temp);
        }
        let (memory_args, memory_env) = self.memory_settings(plan);
        cmd.args(memory_args);
        if let Some(mb) = config.memory_limit_mb {
            if let Some(bytes) = plan.kind.address_space_cap(mb) {
                // SAFETY: one setrlimit(2) call on a struct on the stack, no
                // allocation (async-signal-safe, as required after fork).
                unsafe {
                    cmd.pre_exec(move || {
                        let lim = libc::rlimit {
                            rlim_cur: bytes as libc::rlim_t,
                            rlim_max: bytes as libc::rlim_t,
                        };
                        if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
        // The image works in the project: relative paths in its code
        // mean the project's files, wherever the server was started.
        cmd.current_dir(&places.root)
            .args(&config.lisp_runtime_args)
            .args(&plan.args)
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .env("CL_MCP_SWANK_SECRET", secret)
            // A local image's Swank is on loopback, where the server looks,
            // whatever the server's environment says for launched images.
            .env_remove("CL_MCP_SWANK_INTERFACE")
            .env_remove("CL_MCP_SWANK_PORT")
            .env("CL_MCP_FASL_DIR", &places.fasl_dir)
            .envs(memory_env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        (cmd, cap)
    }

    /// `limits_text`, saying so when the process could not join its
    /// cgroups (their caps are then not enforced).
    fn check_cgroups(&self, cgroups: &[PathBuf], pid: Option<u32>, limits_text: String) -> String {
        let mut limits_text = limits_text;
        for dir in cgroups.iter().filter(|_| pid.is_some()) {
            if !limits::in_cgroup(dir, pid.unwrap_or_default()) {
                let w = format!(
                    "the image's cgroup caps (--max-processes, --memory-limit) are NOT \
                     enforced: it could not join its cgroup {}",
                    dir.display()
                );
                tracing::warn!("{w}");
                self.inner.note(NoteLevel::Warning, w.clone());
                limits_text =
                    limits_text.replace("(cgroup ", "(NOT enforced: could not join cgroup ");
            }
        }
        limits_text
    }

    /// The port the image's Swank listens on, from its stdout. When the
    /// Lisp exits first, a cached core it started from is checked and, if
    /// to blame, discarded (see [`Image::blame_cache`]).
    async fn await_port(
        &self,
        port_rx: oneshot::Receiver<u16>,
        plan: &LaunchPlan,
    ) -> Result<u16, ImageError> {
        match tokio::time::timeout(self.inner.config.start_timeout, port_rx).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => {
                // Give stderr a moment to deliver the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some(core) = &plan.core {
                    self.blame_cache(plan, core).await;
                }
                Err(ImageError::StartFailed(
                    "the Lisp image exited while starting".into(),
                ))
            }
            Err(_) => Err(ImageError::StartFailed(format!(
                "the Lisp image did not start Swank within {} s",
                self.inner.config.start_timeout.as_secs()
            ))),
        }
    }

    /// Is the cache to blame? Starts it once more in check mode: a cache
    /// that fails its check is discarded, and `live` starts once more,
    /// building it anew; one that passes points at something transient
    /// (process or memory limits), and the next start tries it again.
    async fn blame_cache(&self, plan: &LaunchPlan, core: &Path) {
        let check = plan.clone();
        let checked = tokio::task::spawn_blocking(move || {
            core_cache::check_plan(&check, core_cache::CHECK_TIMEOUT, Purpose::Ask)
        })
        .await;
        if let Ok(Err(why)) = checked {
            let why = why.to_string();
            if at_a_limit(&why) {
                // The check ran under the same limits: it says nothing of
                // the cache, which stays.
                tracing::warn!(core = %core.display(), "the Lisp could not start from the cached core at its limits ({why}); the cache stays");
                return;
            }
            core_cache::remove_entry(core);
            let text = format!(
                "the cached core {} does not start ({why}); discarded it and \
                 building it again",
                core.display()
            );
            tracing::warn!("{text}");
            self.inner.note(NoteLevel::Warning, text.clone());
            *self.inner.start_notice.guard() = Some(format!(
                "the cached core {} did not start ({why}); it was discarded and \
                 built again for this call",
                core.display()
            ));
            self.inner.cache_discarded.store(true, Ordering::SeqCst);
        } else {
            tracing::warn!(core = %core.display(), "the Lisp exited while starting from the cached core, which passes its check; the next start retries it");
        }
    }
}

/// Whether a Lisp's failure `why` is one of a process or memory limit
/// (a thread or process it could not make, memory it could not map): a
/// failure of the moment, not of the files it started from.
pub(super) fn at_a_limit(why: &str) -> bool {
    [
        "Could not create new OS thread",
        "Resource temporarily unavailable",
        "Cannot allocate memory",
        "Heap exhausted",
    ]
    .iter()
    .any(|w| why.contains(w))
}

/// What a start failure at a limit ([`at_a_limit`]) adds to the Lisp's
/// words.
pub(super) const AT_A_LIMIT: &str = "(the Lisp is at its limit of processes and threads, or of \
     memory: --max-processes, or the user's RLIMIT_NPROC; end programs the user runs, or \
     raise the limit)";

/// `text` with [`AT_A_LIMIT`] on a line of its own when `at_limit`.
pub(super) fn with_limit_hint(text: String, at_limit: bool) -> String {
    if at_limit {
        format!("{text}\n{AT_A_LIMIT}")
    } else {
        text
    }
}

/// A started process not yet connected to: what a failed start needs to
/// stop it and say what the Lisp said.
struct Pending {
    kill: oneshot::Sender<()>,
    tail: Arc<LastWords>,
    /// The image's `RLIMIT_NPROC`, when it has one (no pids cgroup).
    nproc: Option<u64>,
}

/// An `RLIMIT_NPROC` this low may be why a start failed however the Lisp
/// put it (a connection Swank reset for want of a thread says nothing).
const LOW_NPROC: u64 = 64;

impl Pending {
    /// Stops the process; a start failure gets the Lisp's last words on
    /// stderr appended.
    fn fail(self, e: ImageError) -> ImageError {
        let _ = self.kill.send(());
        let ImageError::StartFailed(msg) = e else {
            return e;
        };
        let tail = self.tail.stderr();
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        let words = if lines.iter().all(|l| l.trim().is_empty()) {
            None
        } else {
            Some(lisp_words(&lines))
        };
        let at_limit =
            words.as_deref().is_some_and(at_a_limit) || self.nproc.is_some_and(|n| n < LOW_NPROC);
        let text = match words {
            None => msg,
            Some(words) => format!("{msg}; the Lisp said:\n{words}"),
        };
        ImageError::StartFailed(with_limit_hint(text, at_limit))
    }
}

/// A fresh image's Swank connection and where its evaluations run.
struct Connected {
    client: SwankClient,
    events: mpsc::UnboundedReceiver<SwankEvent>,
    direct: Option<(DirectChannel, i64)>,
    direct_thread: Option<i64>,
    direct_socket: Option<&'static str>,
    worker: Option<i64>,
}

/// Connects to the fresh image's Swank with its secret, opens the
/// evaluation channel, or else starts a Swank worker thread.
async fn connect_local(
    address: &str,
    secret: String,
    plan: &LaunchPlan,
) -> Result<Connected, ImageError> {
    let (client, events) = SwankClient::connect(address, Some(secret))
        .await
        .map_err(|e| {
            ImageError::StartFailed(format!("cannot connect to the image's Swank: {e}"))
        })?;
    let direct = if plan.kind.has_threads() {
        open_direct(&client).await
    } else {
        None
    };
    let direct_thread = direct.as_ref().map(|(_, id)| *id);
    let direct_socket = direct.as_ref().map(|(ch, _)| ch.socket_kind());
    let worker = match direct_thread {
        Some(thread) => Some(thread),
        None => eval_worker(&client, plan.kind).await?,
    };
    Ok(Connected {
        client,
        events,
        direct,
        direct_thread,
        direct_socket,
        worker,
    })
}

impl Image {
    /// The local image's limits in words, for `image-info` and `doctor`.
    fn limits_text(&self, plan: &LaunchPlan, caps: &[String]) -> String {
        let cfg = &self.inner.config;
        let heap = match cfg.memory_limit_mb {
            Some(mb) => match plan.kind.address_space_cap(mb) {
                Some(bytes) => format!(
                    "heap: at most {mb} MiB (--memory-limit; address space capped at {} MiB)",
                    bytes / (1024 * 1024)
                ),
                None if plan.kind.soft_memory_limit() => format!(
                    "heap: an evaluation keeping more than {mb} MiB alive is stopped, the image \
                     kept (--memory-limit; the runtime's heap is {} MiB)",
                    plan.kind.heap_mb(mb)
                ),
                None => format!("heap: at most {mb} MiB (--memory-limit)"),
            },
            None => "heap: the implementation's default (--memory-limit MB caps it)".into(),
        };
        let idle = match cfg.idle_timeout {
            Some(d) => format!(
                "idle: stopped after {} s without a call (--image-idle-secs)",
                d.as_secs()
            ),
            None => "idle: never stopped for idleness (--image-idle-secs S would)".into(),
        };
        let mut s = format!("limits:\n  {}\n  {heap}\n  {idle}", caps.join("\n  "));
        if let Some(q) = &cfg.image_quota {
            s.push_str(&format!(
                "\n  images: {} running of at most {} on this server (--max-images)",
                q.in_use(),
                q.max()
            ));
        }
        s
    }
}

/// The persistent evaluation thread, started through Swank (`None`: a Lisp
/// without threads evaluates each request on Swank's own loop).
pub(super) async fn eval_worker(
    client: &SwankClient,
    kind: LispKind,
) -> Result<Option<i64>, ImageError> {
    if !kind.has_threads() {
        return Ok(None);
    }
    // Bounded: a Swank that cannot make the thread and says nothing (its
    // control thread stuck) must fail the start, not hold every call.
    match tokio::time::timeout(
        WORKER_START_LIMIT,
        client.spawn_worker_thread("cl-mcp-eval"),
    )
    .await
    {
        Ok(r) => r.map(Some).map_err(|e| {
            ImageError::StartFailed(format!("cannot start the evaluation thread: {e}"))
        }),
        Err(_) => Err(ImageError::StartFailed(format!(
            "the image's Swank did not start the evaluation thread within {} s (it answers \
             no request: at its limit of processes and threads? see --max-processes and the \
             user's RLIMIT_NPROC)",
            WORKER_START_LIMIT.as_secs()
        ))),
    }
}

/// How long a fresh image's Swank may take to start the evaluation thread.
const WORKER_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);
