//! Every process the server runs for an image besides the image itself —
//! asking the Lisp what it is (`--version`), asking its ASDF for Swank,
//! building and checking its cache entry — confined as the image is: the
//! image's Landlock sandbox, cgroup caps and environment. (The image's own
//! start, `supervisor/start_local.rs`, applies the same pieces.) A build
//! may also write the cache, where it puts the core or fasls; nothing else.
//! Which executables may run at all, and where an image's files are, is
//! `places.rs`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::limits;
use super::sandbox::{self, Confinement, Places, SandboxConfig, SandboxMode};
use super::ImageError;

/// What a confined process is run for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Asking or checking: the image's own rules.
    Ask,
    /// Building the cache entry: the image's rules and the cache writable.
    Build,
}

/// The confinement of an image's helper processes, prepared in the server
/// before any of them is forked.
pub struct ProcessJail {
    ask: Confinement,
    build: Confinement,
    /// The image's environment under `strict` (`None`: the server's).
    env: Option<Vec<(OsString, OsString)>>,
    /// `TMPDIR` when the image has a private temp dir.
    temp: Option<PathBuf>,
    max_processes: Option<u32>,
    memory_bytes: Option<u64>,
}

impl std::fmt::Debug for ProcessJail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessJail")
            .field("sandbox", &self.ask.report.mode)
            .field("temp", &self.temp)
            .field("max_processes", &self.max_processes)
            .field("memory_bytes", &self.memory_bytes)
            .finish()
    }
}

impl ProcessJail {
    /// The jail for an image of `sandbox` in `places`; fails as the image's
    /// own start would (strict without Landlock, a cache the image could
    /// write).
    pub fn prepare(
        sandbox: &SandboxConfig,
        places: &Places,
        max_processes: Option<u32>,
        memory_limit_mb: Option<u64>,
    ) -> Result<ProcessJail, ImageError> {
        let temp = (places.temp != std::env::temp_dir()).then(|| places.temp.to_path_buf());
        Ok(ProcessJail {
            ask: sandbox::prepare(sandbox, places)?,
            build: sandbox::prepare_for_build(sandbox, places)?,
            env: sandbox::image_environment(sandbox.mode),
            temp,
            max_processes,
            // As the image's own cap (`start_local`), without knowing the
            // implementation's heap yet.
            memory_bytes: memory_limit_mb.map(|mb| (mb + (mb / 2).max(512)) * 1024 * 1024),
        })
    }

    /// No confinement: for the user's own commands (`doctor`), which run
    /// with the user's rights as any program they start does.
    pub fn none() -> ProcessJail {
        let off = SandboxConfig {
            mode: SandboxMode::Off,
            ..SandboxConfig::default()
        };
        let nowhere = Path::new("/");
        let places = Places {
            root: nowhere,
            cache: nowhere,
            fasl: nowhere,
            coverage: nowhere,
            temp: nowhere,
            lisp: nowhere,
            swank_loader: None,
        };
        let unconfined = || sandbox::prepare(&off, &places).expect("sandbox off always prepares");
        ProcessJail {
            ask: unconfined(),
            build: unconfined(),
            env: None,
            temp: None,
            max_processes: None,
            memory_bytes: None,
        }
    }

    /// Runs `run` (which spawns `cmd` and waits for it) with `cmd` confined
    /// for `purpose`: caps, sandbox and environment set in the child before
    /// it runs; the caps' cgroups removed once `run` is done.
    pub fn run<T>(
        &self,
        purpose: Purpose,
        cmd: &mut Command,
        run: impl FnOnce(&mut Command) -> T,
    ) -> T {
        let caps = limits::prepare_caps(self.max_processes, self.memory_bytes);
        for step in caps.child_steps() {
            // SAFETY: one system call (write or setrlimit), no allocation;
            // registered before the sandbox, which would refuse the write.
            unsafe {
                cmd.pre_exec(move || step.apply_in_child());
            }
        }
        let confinement = match purpose {
            Purpose::Ask => &self.ask,
            Purpose::Build => &self.build,
        };
        if let Some(fd) = confinement.raw_fd() {
            let own_proc = confinement.own_proc();
            // SAFETY: the closure makes only system calls and allocates
            // nothing (async-signal-safe, as required after fork).
            unsafe {
                cmd.pre_exec(move || sandbox::restrict_in_child(fd, own_proc));
            }
        }
        if let Some(env) = &self.env {
            // The variables the caller set are kept; the rest is the image's.
            let set: Vec<(OsString, Option<OsString>)> = cmd
                .get_envs()
                .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
                .collect();
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
            for (k, v) in set {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
        }
        if let Some(t) = &self.temp {
            cmd.env("TMPDIR", t);
        }
        let out = run(cmd);
        let dirs = caps.dirs();
        drop(caps);
        for dir in dirs {
            limits::release_cgroup_blocking(&dir);
        }
        out
    }
}
