//! Finding the Lisp executable and Swank, in the order README "Finding the Lisp" gives:
//! Lisp: `--lisp`, `CL_MCP_LISP`, `sbcl` on `PATH`.
//! Swank: `--swank-loader`, `SWANK_LOADER`, Debian's cl-swank, the ASDF
//! system `swank`, Quicklisp's setup.

use std::path::{Path, PathBuf};

use super::implementation::{self, LispKind};
use super::jail::{ProcessJail, Purpose};
use super::stamp::file_stamp;
use super::{ImageConfig, ImageError};

/// Debian's `cl-swank` package puts the loader here.
pub const DEBIAN_SWANK_LOADER: &str = "/usr/share/common-lisp/source/slime/swank-loader.lisp";

/// How Swank gets into the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwankSource {
    /// SLIME's `swank-loader.lisp` (loads Swank and its contribs).
    Loader(PathBuf),
    /// `(asdf:load-system "swank")`: a `swank` system ASDF can find.
    Asdf,
    /// Quicklisp's `setup.lisp`, then `(ql:quickload "swank")`.
    Quicklisp(PathBuf),
}

impl SwankSource {
    /// Text identifying this Swank for the core cache key (path plus the
    /// SLIME version file or the loader's size and mtime).
    pub fn fingerprint(&self) -> String {
        match self {
            SwankSource::Loader(p) => {
                let dir = p.parent().unwrap_or(Path::new("/"));
                let version =
                    std::fs::read_to_string(dir.join("slime-version")).unwrap_or_default();
                format!(
                    "loader:{}:{}:{}:{}",
                    p.display(),
                    version.trim(),
                    file_stamp(p),
                    file_stamp(&dir.join("swank.lisp"))
                )
            }
            SwankSource::Asdf => "asdf".into(),
            SwankSource::Quicklisp(p) => format!("quicklisp:{}:{}", p.display(), file_stamp(p)),
        }
    }
}

/// Searches `PATH` for an executable named `name`.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The Lisp executable to run.
pub fn find_lisp(config: &ImageConfig) -> Result<PathBuf, ImageError> {
    if let Some(p) = &config.lisp {
        return implementation::resolve(&p.to_string_lossy(), which).ok_or_else(|| {
            ImageError::NotFound(format!(
                "the Lisp given by --lisp / CL_MCP_LISP ({}) is not an executable file nor \
                 an implementation found on PATH ({})",
                p.display(),
                LispKind::ALL.map(|k| k.name()).join(", ")
            ))
        });
    }
    which("sbcl").ok_or_else(|| {
        ImageError::NotFound(
            "no `sbcl` on PATH: install SBCL (e.g. `apt-get install sbcl`) or pass --lisp PATH \
             (or set CL_MCP_LISP)"
                .into(),
        )
    })
}

/// The Lisp executable and which implementation it is (asked once per
/// binary, in `jail`).
pub fn find_lisp_kind(
    config: &ImageConfig,
    jail: &ProcessJail,
) -> Result<(PathBuf, LispKind), ImageError> {
    let lisp = find_lisp(config)?;
    let kind = lisp_kind(&lisp, jail)?;
    Ok((lisp, kind))
}

/// Which implementation `lisp` is (asked once per binary, in `jail`).
pub fn lisp_kind(lisp: &Path, jail: &ProcessJail) -> Result<LispKind, ImageError> {
    implementation::detect(lisp, jail).map_err(|e| ImageError::NotFound(e.to_string()))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// Where Swank comes from. `asdf_has_swank` is asked only when no loader
/// file is found (it costs a Lisp process).
pub fn find_swank(
    config: &ImageConfig,
    asdf_has_swank: impl FnOnce() -> bool,
) -> Result<SwankSource, ImageError> {
    if let Some(p) = &config.swank_loader {
        if p.is_file() {
            return Ok(SwankSource::Loader(p.clone()));
        }
        return Err(ImageError::NotFound(format!(
            "the Swank loader given by --swank-loader / SWANK_LOADER ({}) does not exist",
            p.display()
        )));
    }
    let debian = Path::new(DEBIAN_SWANK_LOADER);
    if debian.is_file() {
        return Ok(SwankSource::Loader(debian.to_path_buf()));
    }
    if asdf_has_swank() {
        return Ok(SwankSource::Asdf);
    }
    if let Some(setup) = home()
        .map(|h| h.join("quicklisp/setup.lisp"))
        .filter(|p| p.is_file())
    {
        return Ok(SwankSource::Quicklisp(setup));
    }
    Err(ImageError::NotFound(
        "Swank not found: install SLIME's Swank (`apt-get install cl-swank`), pass \
         --swank-loader PATH/swank-loader.lisp (or set SWANK_LOADER), make the ASDF system \
         `swank` findable, or install Quicklisp"
            .into(),
    ))
}

/// Quicklisp's `setup.lisp` in its default place, when installed.
pub fn find_quicklisp() -> Option<PathBuf> {
    home()
        .map(|h| h.join("quicklisp/setup.lisp"))
        .filter(|p| p.is_file())
}

/// Asks the Lisp (run in `jail`) whether ASDF can find a `swank` system.
pub fn asdf_finds_swank(lisp: &Path, kind: LispKind, jail: &ProcessJail) -> bool {
    let form = format!(
        "(progn (require \"asdf\") (if (funcall (intern \"FIND-SYSTEM\" \"ASDF\") \"swank\" nil) {} {}))",
        kind.exit_form(0),
        kind.exit_form(1)
    );
    let mut cmd = std::process::Command::new(lisp);
    cmd.args(kind.start_args(None))
        .arg(kind.eval_flag())
        .arg(form)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    jail.run(Purpose::Ask, &mut cmd, |cmd| cmd.status())
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_paths_win_and_bad_ones_are_errors() {
        let cfg = ImageConfig {
            lisp: Some("/nonexistent/sbcl".into()),
            swank_loader: Some("/nonexistent/swank-loader.lisp".into()),
            ..ImageConfig::default()
        };
        let e = find_lisp(&cfg).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/sbcl"), "{e}");
        let e = find_swank(&cfg, || true).unwrap_err().to_string();
        assert!(e.contains("SWANK_LOADER"), "{e}");
    }

    #[test]
    fn finds_installed_sbcl_and_debian_swank() {
        let cfg = ImageConfig::default();
        assert!(find_lisp(&cfg).unwrap().ends_with("sbcl"));
        assert_eq!(
            find_swank(&cfg, || panic!("not asked when the loader exists")).unwrap(),
            SwankSource::Loader(DEBIAN_SWANK_LOADER.into())
        );
    }
}
