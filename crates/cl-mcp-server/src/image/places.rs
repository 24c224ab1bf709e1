//! Where an image's files are (the cache, the project root, the project's
//! fasl, coverage and temp dirs) and which executables the server may run
//! for it: [`runnable`] refuses one the image (or a file tool) could have
//! written, so nothing an agent writes is ever run outside the sandbox,
//! nor as a build inside it.

use std::path::{Path, PathBuf};

use super::core_cache::{self, default_cache_dir};
use super::jail::ProcessJail;
use super::sandbox::{self, Places, SandboxMode};
use super::{locate, ImageConfig, ImageError};
use crate::sync::RwLockExt;

/// Where an image keeps its files: see [`image_places`].
pub struct ImagePlaces {
    pub cache: PathBuf,
    pub root: PathBuf,
    pub fasl_dir: PathBuf,
    /// Where `asdf-test-system {coverage: true}` writes its report.
    pub coverage: PathBuf,
    /// The image's temp dir ([`image_temp_dir`]).
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
    let temp = image_temp_dir(&cache, &project).map_err(|e| {
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
/// a Lisp is ([`runnable`]) against the image's `places`.
pub fn runnable_launcher(
    config: &ImageConfig,
    places: &ImagePlaces,
    launcher: &Path,
) -> Result<PathBuf, ImageError> {
    let write = image_writes(config, places, launcher);
    runnable(Executable::Launcher, launcher, &places.root, &write)
}

/// The temp dir an image gets: the system's (`TMPDIR`, else `/tmp`),
/// unless the server's cache lies under it, where an image writing the
/// temp dir could rewrite the cores every later image loads. Then the
/// image gets a private directory of this project's there instead
/// (`<tmp>/cl-mcp-server-tmp-<uid>/<project>`, 0700, ours), and its
/// `TMPDIR` says so.
pub fn image_temp_dir(cache: &Path, project: &str) -> std::io::Result<PathBuf> {
    let system = std::env::temp_dir();
    let (Ok(tmp), Ok(cache)) = (system.canonicalize(), cache.canonicalize()) else {
        return Ok(system);
    };
    if !cache.starts_with(&tmp) {
        return Ok(system);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = core_cache::private_dir(&tmp.join(format!("cl-mcp-server-tmp-{uid}")))?;
    core_cache::private_dir(&base.join(project))
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
