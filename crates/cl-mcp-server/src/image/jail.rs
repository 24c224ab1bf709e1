//! Every process the server runs for an image besides the image itself —
//! asking the Lisp what it is (`--version`), asking its ASDF for Swank,
//! building and checking its cache entry — confined as the image is: the
//! image's Landlock sandbox, cgroup caps and environment. (The image's own
//! start, `supervisor/start_local.rs`, applies the same pieces.) A build
//! may also write the cache, where it puts the core or fasls; nothing else.
//!
//! And which Lisp may run at all: [`runnable_lisp`] refuses an executable
//! the image (or a file tool) could have written, so nothing an agent
//! writes is ever run outside the sandbox, nor as a build inside it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::core_cache::{self, default_cache_dir};
use super::limits;
use super::sandbox::{self, Confinement, Places, SandboxConfig, SandboxMode};
use super::{locate, ImageConfig, ImageError};
use crate::sync::RwLockExt;

/// Where an image keeps its files: see [`image_places`].
pub struct ImagePlaces {
    pub cache: PathBuf,
    pub root: PathBuf,
    pub fasl_dir: PathBuf,
    /// Where `asdf-test-system {coverage: true}` writes its report.
    pub coverage: PathBuf,
    /// The image's temp dir ([`sandbox::image_temp_dir`]).
    pub temp: PathBuf,
}

impl ImagePlaces {
    /// The sandbox's view of these places, for an image of `lisp`.
    pub fn sandbox_places<'a>(&'a self, config: &'a ImageConfig, lisp: &'a Path) -> Places<'a> {
        let debian_loader = Path::new(locate::DEBIAN_SWANK_LOADER);
        Places {
            root: &self.root,
            cache: &self.cache,
            fasl: &self.fasl_dir,
            coverage: &self.coverage,
            temp: &self.temp,
            lisp,
            swank_loader: config
                .swank_loader
                .as_deref()
                .or_else(|| debian_loader.is_file().then_some(debian_loader)),
        }
    }
}

/// The cache, the project root (now) and the project's private fasl,
/// coverage and temp directories, made if missing.
pub fn image_places(config: &ImageConfig) -> Result<ImagePlaces, ImageError> {
    let cache = config.cache_dir.clone().unwrap_or_else(default_cache_dir);
    let root = match &config.project_root {
        Some(r) => r.reading().clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let project = core_cache::project_key(&root);
    let fasl_dir = core_cache::private_dir(&cache.join("fasl"))
        .and_then(|dir| core_cache::private_dir(&dir.join(&project)))
        .map_err(|e| {
            ImageError::StartFailed(format!(
                "cannot prepare the private fasl directory under {}: {e}",
                cache.display()
            ))
        })?;
    let coverage = core_cache::coverage_dir(&cache, &root);
    core_cache::private_dir(&cache.join("coverage"))
        .and_then(|_| core_cache::private_dir(&coverage))
        .map_err(|e| {
            ImageError::StartFailed(format!(
                "cannot prepare the coverage directory under {}: {e}",
                cache.display()
            ))
        })?;
    let temp = sandbox::image_temp_dir(&cache, &project).map_err(|e| {
        ImageError::StartFailed(format!("cannot prepare the image's temp directory: {e}"))
    })?;
    Ok(ImagePlaces {
        cache,
        root,
        fasl_dir,
        coverage,
        temp,
    })
}

/// Where an image of `config` may write (none listed under `--sandbox
/// off`, where it may write anywhere: only the project root is then
/// checked, which the file tools write).
fn image_writes(config: &ImageConfig, places: &ImagePlaces, lisp: &Path) -> Vec<PathBuf> {
    match config.sandbox.mode {
        SandboxMode::Off => Vec::new(),
        _ => sandbox::write_dirs(&config.sandbox, &places.sandbox_places(config, lisp)),
    }
}

/// The `--image-launcher` executable as it is run (canonical), checked as
/// a Lisp is ([`runnable`]).
pub fn runnable_launcher(config: &ImageConfig, launcher: &Path) -> Result<PathBuf, ImageError> {
    let places = image_places(config)?;
    let write = image_writes(config, &places, launcher);
    runnable(Executable::Launcher, launcher, &places.root, &write)
}

/// The Lisp `config` names, checked by [`runnable_lisp`], its places and
/// the jail its helper processes run in.
pub fn confined_lisp(
    config: &ImageConfig,
) -> Result<(PathBuf, ImagePlaces, ProcessJail), ImageError> {
    let lisp = locate::find_lisp(config)?;
    let places = image_places(config)?;
    let lisp = runnable_lisp(&lisp, &places.root, &image_writes(config, &places, &lisp))?;
    let jail = ProcessJail::prepare(
        &config.sandbox,
        &places.sandbox_places(config, &lisp),
        config.max_processes,
        config.memory_limit_mb,
    )?;
    Ok((lisp, places, jail))
}

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

/// The Lisp executable `lisp` as it is run (its canonical path, so no link
/// can be turned elsewhere between this check and the start), unless it
/// lies where the image may write (`write`: the sandbox's writable places)
/// or under the project root (which the file tools write, whatever the
/// sandbox): what an agent could have written is never run.
pub fn runnable_lisp(lisp: &Path, root: &Path, write: &[PathBuf]) -> Result<PathBuf, ImageError> {
    runnable(Executable::Lisp, lisp, root, write)
}

/// Which of the executables named at start is checked.
#[derive(Clone, Copy, Debug)]
pub enum Executable {
    /// `--lisp`, `--allow-lisp`, an implementation on `PATH`.
    Lisp,
    /// `--image-launcher`.
    Launcher,
}

/// [`runnable_lisp`] for any executable the server runs for an image.
pub fn runnable(
    what: Executable,
    path: &Path,
    root: &Path,
    write: &[PathBuf],
) -> Result<PathBuf, ImageError> {
    let (noun, flags) = match what {
        Executable::Lisp => ("Lisp", "--lisp or --allow-lisp"),
        Executable::Launcher => ("image launcher", "--image-launcher"),
    };
    let real = path.canonicalize().map_err(|e| {
        ImageError::NotFound(format!(
            "the {noun} {} cannot be found: {e}",
            path.display()
        ))
    })?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let place = if real.starts_with(&root) {
        Some(format!("under the project root {}", root.display()))
    } else {
        write
            .iter()
            .find(|w| real.starts_with(w))
            .map(|w| format!("under {}, where the image may write", w.display()))
    };
    match place {
        None => Ok(real),
        Some(place) => Err(ImageError::Implementation(format!(
            "refusing to run the {noun} {}{}: it lies {place}, so code the image or a file \
             tool wrote could run outside the sandbox. Install it outside the project and the \
             image's writable places and name it with {flags}.",
            path.display(),
            if real == path {
                String::new()
            } else {
                format!(" ({})", real.display())
            }
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lisp_under_the_root_or_a_writable_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        let other = dir.path().join("other");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(root.join("bin/sbcl"), "").unwrap();
        std::fs::write(other.join("sbcl"), "").unwrap();
        let e = runnable_lisp(&root.join("bin/sbcl"), &root, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("under the project root"), "{e}");
        let w = other.canonicalize().unwrap();
        let e = runnable_lisp(&other.join("sbcl"), &root, std::slice::from_ref(&w))
            .unwrap_err()
            .to_string();
        assert!(e.contains("where the image may write"), "{e}");
        // A link outside that leads into the root is refused too.
        let link = dir.path().join("link-sbcl");
        std::os::unix::fs::symlink(root.join("bin/sbcl"), &link).unwrap();
        assert!(runnable_lisp(&link, &root, &[]).is_err());
        // Elsewhere: its canonical path.
        let ok = runnable_lisp(&other.join("sbcl"), &root, &[]).unwrap();
        assert_eq!(ok, w.join("sbcl"));
    }
}
