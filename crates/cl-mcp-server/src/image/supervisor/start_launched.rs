//! An image started by `--image-launcher CMD`: the server prepares what a
//! local start would (the core cache, a secret, the project's fasl
//! directory), runs the launcher with the image's command line, reads the
//! Swank endpoint it prints, and connects as in attach mode. The launcher
//! stays running while the image lives: its exit is the image's death,
//! and stopping it (stdin closed, SIGTERM, SIGKILL after a grace period) is
//! how the image is stopped. The launcher leads a process group of its own
//! and ends with the server, however the server ends (`launcher_groups`).
//! Where the image runs, its sandbox and its limits are the launcher's; the
//! server confines nothing it starts.
//!
//! The contract (README "Images launched elsewhere"):
//! - arguments: the command line that runs the image on this host (the
//!   Lisp, its runtime options, the boot arguments); environment: the
//!   server's, plus `CL_MCP_SWANK_SECRET`, `CL_MCP_FASL_DIR`, the plan's
//!   variables and `CL_MCP_LAUNCH_*` (what the server was asked for);
//! - stdout, first line: `{"host": "...", "port": N}`, optionally with
//!   `"secret"` (else the one handed over) and `"pid"` (the image's process
//!   on this host); the rest of stdout and all of stderr are the image's
//!   log and last words;
//! - stop the image and exit on SIGTERM or when stdin closes; exit when the
//!   image dies.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use swank_client::{RexOutcome, SwankClient, Thread};
use tokio::io::BufReader;
use tokio::sync::{oneshot, watch};

use crate::image::core_cache::LaunchPlan;
use crate::image::last_words::LastWords;
use crate::image::{ImageError, ImageMode};

use super::launcher_groups;
use super::live::Live;
use super::log_pump::{log_stderr, log_stdout, next_capped_line, LOG_LINE_CAP};
use super::reaper::Reaper;
use super::secret::random_secret;
use super::start_local::eval_worker;
use super::{Image, NoteLevel};

/// How long a launcher has to clean up (a namespace, a pod) once asked to
/// stop, before SIGKILL.
const LAUNCHER_GRACE: Duration = Duration::from_secs(10);
/// How long the first Swank request may take on a fresh connection: a Swank
/// that refused our secret closes, one that wants a secret never answers.
const FIRST_ANSWER: Duration = Duration::from_secs(10);

/// The launcher's first line of stdout.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Endpoint {
    host: String,
    port: u16,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    pid: Option<u32>,
}

/// Why a launcher gave no endpoint.
#[derive(Debug, thiserror::Error)]
enum EndpointError {
    #[error("it printed no endpoint within {0} s")]
    Late(u64),
    #[error("{why}; the launcher ended: {status}")]
    Ended {
        why: Box<EndpointError>,
        status: String,
    },
    #[error("it printed nothing before closing its stdout")]
    Nothing,
    #[error("its first line {line:?} is not the endpoint line ({why})")]
    NotEndpoint {
        line: String,
        why: serde_json::Error,
    },
    #[error("its endpoint names an empty host")]
    EmptyHost,
}

fn parse_endpoint(line: Option<&str>) -> Result<Endpoint, EndpointError> {
    let line = line.ok_or(EndpointError::Nothing)?;
    let endpoint: Endpoint =
        serde_json::from_str(line.trim()).map_err(|why| EndpointError::NotEndpoint {
            line: line.chars().take(200).collect(),
            why,
        })?;
    if endpoint.host.trim().is_empty() {
        return Err(EndpointError::EmptyHost);
    }
    Ok(endpoint)
}

/// The launcher's endpoint line, read within `within`; on a failure the
/// launcher is stopped (through `kill`) and its exit status, when it comes
/// within a moment, said.
async fn await_endpoint(
    first: oneshot::Receiver<Option<String>>,
    exit: &watch::Receiver<Option<String>>,
    kill: oneshot::Sender<()>,
    within: Duration,
) -> Result<(Endpoint, oneshot::Sender<()>), EndpointError> {
    let Ok(first) = tokio::time::timeout(within, first).await else {
        let _ = kill.send(());
        return Err(EndpointError::Late(within.as_secs()));
    };
    match parse_endpoint(first.ok().flatten().as_deref()) {
        Ok(endpoint) => Ok((endpoint, kill)),
        Err(why) => {
            let _ = kill.send(());
            // Its exit status says more than a closed pipe.
            let mut exit = exit.clone();
            let _ =
                tokio::time::timeout(Duration::from_secs(2), exit.wait_for(|s| s.is_some())).await;
            let status = exit.borrow().clone();
            Err(match status {
                Some(status) => EndpointError::Ended {
                    why: Box::new(why),
                    status,
                },
                None => why,
            })
        }
    }
}

/// `HOST:PORT`, an IPv6 address in brackets.
fn socket_address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Image {
    /// A fresh image the server owns: the built-in local launcher, or the
    /// configured `--image-launcher`.
    pub(super) async fn start_owned(
        &self,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        match self.inner.config.launcher.clone() {
            None => self.start_local_healing(generation, permit).await,
            Some(launcher) => self.start_launched(&launcher, generation, permit).await,
        }
    }

    async fn start_launched(
        &self,
        launcher: &Path,
        generation: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<Arc<Live>, ImageError> {
        let started = Instant::now();
        let plan = self.launch_plan().await?;
        let secret = random_secret()?;
        let mut cmd = self.launcher_command(launcher, &plan, &secret)?;
        let name = launcher.display().to_string();
        let mut child = cmd.spawn().map_err(|e| {
            ImageError::StartFailed(format!(
                "cannot run the image launcher {name} (--image-launcher): {e}"
            ))
        })?;
        let pid = child.id();
        if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
            launcher_groups::register(pid);
        }
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = Arc::new(LastWords::default());
        let (first_tx, first_rx) = oneshot::channel::<Option<String>>();
        let out_tail = tail.clone();
        let out_done = tokio::spawn(async move {
            let mut out = BufReader::new(stdout);
            let first = next_capped_line(&mut out, LOG_LINE_CAP)
                .await
                .ok()
                .flatten();
            let _ = first_tx.send(first);
            // What follows is the image's output; a port line in it is not
            // ours to take (the endpoint came first).
            let (port_tx, _) = oneshot::channel();
            log_stdout(out, pid, port_tx, out_tail).await;
        });
        let err_done = tokio::spawn(log_stderr(stderr, pid, tail.clone()));
        let (exit_rx, kill_tx) = Reaper {
            child,
            stdin,
            pid,
            cgroups: Vec::new(),
            memory_limit_mb: None,
            permit,
            pumps: [out_done, err_done],
            grace: Some(LAUNCHER_GRACE),
        }
        .spawn();
        let failed = |why: String| -> ImageError {
            ImageError::StartFailed(launcher_failure(&name, &why, &tail))
        };
        let within = self.inner.config.start_timeout;
        let (endpoint, kill_tx) = match await_endpoint(first_rx, &exit_rx, kill_tx, within).await {
            Ok(e) => e,
            Err(why) => return Err(failed(why.to_string())),
        };
        let address = socket_address(&endpoint.host, endpoint.port);
        let secret = endpoint.secret.unwrap_or(secret);
        let (client, events) = match connect_launched(&address, secret, &plan).await {
            Ok(c) => c,
            Err(e) => {
                let _ = kill_tx.send(());
                return Err(failed(e.to_string()));
            }
        };
        let limits = self.launched_limits_text(&name);
        let live = Arc::new(Live {
            generation,
            mode: ImageMode::Launched,
            client: client.0,
            pid: endpoint.pid,
            worker: Mutex::new(client.1),
            // The evaluation channel is a socket on the image's host (an
            // abstract Unix socket, or loopback): evaluations take Swank.
            direct: tokio::sync::Mutex::new(None),
            direct_thread: None,
            direct_socket: None,
            started_at: SystemTime::now(),
            core: plan.core.clone(),
            address: address.clone(),
            dead: AtomicBool::new(false),
            stopped_on_purpose: AtomicBool::new(false),
            exit: exit_rx,
            kill: Mutex::new(Some(kill_tx)),
            last_words: tail,
            kind: Some(plan.kind),
            sandbox: None,
            limits: Some(limits),
        });
        self.spawn_monitor(&live, events);
        tracing::info!(
            launcher = %name,
            %address,
            generation,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Lisp image ready (launched)"
        );
        self.inner.note(
            NoteLevel::Info,
            format!(
                "Lisp image started by the launcher {name} (generation {generation}, Swank at \
                 {address}, {} ms)",
                started.elapsed().as_millis()
            ),
        );
        Ok(live)
    }

    /// The launcher's command: the image's command line as its arguments,
    /// what the image needs and what the server was asked for in its
    /// environment. Not confined: the launcher confines the image.
    fn launcher_command(
        &self,
        launcher: &Path,
        plan: &LaunchPlan,
        secret: &str,
    ) -> Result<tokio::process::Command, ImageError> {
        let config = &self.inner.config;
        let places = self.image_places()?;
        // Never a launcher an agent could have rewritten: it runs with the
        // server's rights, outside every sandbox.
        let launcher = crate::image::places::runnable_launcher(config, &places, launcher)
            .map_err(|e| ImageError::StartFailed(e.to_string()))?;
        let (memory_args, memory_env) = self.memory_settings(plan);
        let mut cmd = tokio::process::Command::new(&launcher);
        // A launcher on this host starts the image in the project (one
        // elsewhere has CL_MCP_LAUNCH_PROJECT_ROOT; the image moves there
        // itself when it sees that directory).
        cmd.current_dir(&places.root)
            .arg(&plan.lisp)
            .args(memory_args)
            .args(&config.lisp_runtime_args)
            .args(&plan.args)
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .env("CL_MCP_SWANK_SECRET", secret)
            .env("CL_MCP_FASL_DIR", &places.fasl_dir)
            .envs(memory_env)
            .env("CL_MCP_LAUNCH_LISP_KIND", plan.kind.name())
            .env("CL_MCP_LAUNCH_PROJECT_ROOT", &places.root)
            .env("CL_MCP_LAUNCH_CACHE_DIR", &places.cache)
            .env("CL_MCP_LAUNCH_SANDBOX", config.sandbox.mode.as_str())
            .env(
                "CL_MCP_LAUNCH_MAX_PROCESSES",
                config
                    .max_processes
                    .map_or(String::new(), |n| n.to_string()),
            )
            .env(
                "CL_MCP_LAUNCH_MEMORY_LIMIT_MB",
                config
                    .memory_limit_mb
                    .map_or(String::new(), |n| n.to_string()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Dropped without a stop (the server going away), the launcher
            // sees its stdin close and cleans up; SIGKILL would leave its
            // namespace or pod behind.
            .kill_on_drop(false);
        launcher_groups::dies_with_server(&mut cmd);
        Ok(cmd)
    }

    /// What `image-info` says of a launched image's limits: the launcher's,
    /// and what the server asked it for.
    fn launched_limits_text(&self, launcher: &str) -> String {
        let cfg = &self.inner.config;
        let asked = [
            Some(format!("sandbox {}", cfg.sandbox.mode.as_str())),
            cfg.max_processes.map(|n| format!("at most {n} processes")),
            cfg.memory_limit_mb.map(|mb| format!("heap {mb} MiB")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let mut s = format!(
            "limits: the image launcher's ({launcher}): this server neither confines nor caps a \
             launched image; it handed the launcher what it was asked for ({asked}; \
             CL_MCP_LAUNCH_*), and the heap option is on the image's command line"
        );
        if let Some(d) = cfg.idle_timeout {
            s.push_str(&format!(
                "\n  idle: stopped after {} s without a call (--image-idle-secs)",
                d.as_secs()
            ));
        }
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

/// What a failed launch says: the launcher, why, and its last words.
fn launcher_failure(name: &str, why: &str, tail: &LastWords) -> String {
    let said: Vec<String> = tail
        .stderr()
        .iter()
        .filter(|&l| !l.trim().is_empty())
        .cloned()
        .collect();
    let mut text = format!(
        "the image launcher {name} (--image-launcher) did not give a usable image: {why}. A \
         launcher prints one line on stdout, {{\"host\": \"ADDRESS\", \"port\": PORT}} (README, \
         \"Images launched elsewhere\")"
    );
    if !said.is_empty() {
        let from = said.len().saturating_sub(8);
        text.push_str("; it said on stderr:\n  ");
        text.push_str(&said[from..].join("\n  "));
    }
    text
}

/// A connection to the launched image's Swank, proven with a first answer
/// (a wrong secret closes it, a missing one never answers), and its
/// worker thread.
async fn connect_launched(
    address: &str,
    secret: String,
    plan: &LaunchPlan,
) -> Result<
    (
        (SwankClient, Option<i64>),
        tokio::sync::mpsc::UnboundedReceiver<swank_client::SwankEvent>,
    ),
    ImageError,
> {
    let (client, events) = SwankClient::connect(address, Some(secret))
        .await
        .map_err(|e| {
            ImageError::StartFailed(format!("cannot connect to its Swank at {address}: {e}"))
        })?;
    let probe = client.rex("(swank/backend:getpid)", "COMMON-LISP-USER", Thread::T);
    match tokio::time::timeout(FIRST_ANSWER, probe).await {
        Ok(Ok(RexOutcome::Ok(_))) => {}
        Ok(Ok(RexOutcome::Abort(why))) => {
            return Err(ImageError::StartFailed(format!(
                "its Swank at {address} refused a first request ({})",
                why.unwrap_or_default()
            )))
        }
        Ok(Err(e)) => {
            return Err(ImageError::StartFailed(format!(
                "its Swank at {address} closed the connection ({e}): the secret was refused, \
                 or this is not the image the launcher started"
            )))
        }
        Err(_) => {
            return Err(ImageError::StartFailed(format!(
                "its Swank at {address} accepted the connection but does not answer within {} s \
                 (a Swank that does not run our boot file waits in its debugger on a wrong \
                 secret)",
                FIRST_ANSWER.as_secs()
            )))
        }
    }
    let worker = eval_worker(&client, plan.kind).await?;
    Ok(((client, worker), events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lines() {
        let e = parse_endpoint(Some(r#"{"host":"10.0.0.2","port":4005,"pid":7}"#)).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.pid),
            ("10.0.0.2", 4005, Some(7))
        );
        assert!(e.secret.is_none());
        assert!(matches!(parse_endpoint(None), Err(EndpointError::Nothing)));
        for bad in [
            "10.0.0.2:4005",
            r#"{"host":"h"}"#,
            r#"{"host":"h","port":70000}"#,
        ] {
            let err = parse_endpoint(Some(bad)).unwrap_err();
            assert!(
                matches!(err, EndpointError::NotEndpoint { .. }),
                "{bad}: {err}"
            );
        }
        assert!(matches!(
            parse_endpoint(Some(r#"{"host":" ","port":1}"#)),
            Err(EndpointError::EmptyHost)
        ));
        assert_eq!(socket_address("::1", 5), "[::1]:5");
        assert_eq!(socket_address("pod.ns.svc", 5), "pod.ns.svc:5");
    }
}
