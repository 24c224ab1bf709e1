//! A session's further images (`image-start`): besides its first image
//! (the one `--lisp`/`--swank` names, started on first use), a session may
//! run more, each named and each of any installed implementation, all
//! local, supervised, sandboxed and limited as the first is. They end with
//! the session (`Session::end`).

use std::path::{Path, PathBuf};

use crate::image::implementation::LispKind;
use crate::image::{locate, Image, ImageConfig};

/// One of a session's images and what it was started as.
#[derive(Clone)]
pub struct NamedImage {
    /// How tools address it (`image` argument).
    pub name: String,
    /// The implementation, where its name says it (`sbcl`, `ecl`, ...).
    pub kind: Option<LispKind>,
    /// The `lisp` it was started with, as given (a name or a path).
    pub lisp: String,
    pub image: Image,
    /// The secret part of its handle (`handles`).
    pub key: String,
    /// Calls on it, for the idle timeout and to see it lost.
    pub usage: std::sync::Arc<super::handles::ImageUsage>,
}

/// Why an image cannot be chosen, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImageChoiceError {
    #[error(
        "This session has no image named {name:?} (its images: {known}). image-start starts \
         one; image-list lists them."
    )]
    Unknown { name: String, known: String },
    #[error(
        "This session has an image named {0:?} already: address it with `image: {0:?}`, or give \
         image-start another `name`."
    )]
    Taken(String),
    #[error("An image name is 1 to 40 letters, digits, `-`, `_` or `.`, not {0:?}.")]
    BadName(String),
    #[error(
        "No Lisp {given:?} here: give an implementation installed on this machine ({installed}) \
         or a path the server was started with (--lisp, --allow-lisp PATH)."
    )]
    NoLisp { given: String, installed: String },
    #[error(
        "{given:?} is not a Lisp this server may run: image-start and lisps take an \
         implementation's name (installed here: {installed}) or a path the server was started \
         with (--lisp, --allow-lisp PATH); start the server with --allow-lisp {given} to run it."
    )]
    NotAllowed { given: String, installed: String },
    #[error(
        "{0:?} is the default image (a session's first; for stateless calls, the server's): it \
         stays as long as its session or server (image-restart gives it a fresh start)."
    )]
    First(String),
    #[error("An attached session (--swank) runs no further images of its own.")]
    Attached,
    #[error(
        "The image {handle} lives on node {node}; this is node {here}, which never serves \
         another node's image. Send the call to {node}: behind a proxy, set the Mcp-Param-Image \
         header to the handle (MCP 2026-07-28 clients mirror `image` there) and the proxy routes \
         it to {node}."
    )]
    OtherNode {
        handle: String,
        node: String,
        here: String,
    },
    #[error(
        "The image {handle} is lost: its node {node} is down, and the image's state went with \
         it. image-start starts a new image (on a node that is up); define again what you need."
    )]
    NodeDown { handle: String, node: String },
    #[error(
        "The image {0} is lost: it was stopped (image-stop, or idle too long), or it died, and \
         its state went with it. image-start starts a new image; define again what you need."
    )]
    Lost(String),
    #[error(
        "A stateless (MCP 2026-07-28) call addresses an image by its handle, as image-start \
         gives it (NODE/NAME~KEY), not by the name {0:?}."
    )]
    NeedsHandle(String),
    #[error(
        "{0:?} is neither an image handle (NODE/NAME~KEY, as image-start gives) nor an image name."
    )]
    BadHandle(String),
    #[error("Cannot mint an image handle: {0}")]
    NoKey(std::io::Error),
}

/// Whether `name` may name an image.
pub fn valid_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The implementations installed here (found on `PATH`), in the order of
/// [`LispKind::ALL`].
pub fn installed() -> Vec<LispKind> {
    LispKind::ALL
        .into_iter()
        .filter(|k| crate::image::implementation::resolve(k.name(), locate::which).is_some())
        .collect()
}

/// Names of the installed implementations, for messages.
pub fn installed_names() -> String {
    let names: Vec<&str> = installed().iter().map(|k| k.name()).collect();
    if names.is_empty() {
        "none found on PATH".into()
    } else {
        names.join(", ")
    }
}

/// What a `lisp` value (an implementation's name or a path) stands for:
/// the executable, and the implementation where the name says it. Which
/// Lisps may run is the user's decision, made at start: an
/// implementation's name (found on `PATH`, as `--lisp` is), the `--lisp`
/// value itself, or a path given at start (`--lisp`, `--allow-lisp`);
/// any other path is refused. (Where the executable lies is checked again
/// when the image starts: `image::places::runnable_lisp`.)
pub fn resolve_lisp(
    given: &str,
    config: &ImageConfig,
) -> Result<(PathBuf, Option<LispKind>), ImageChoiceError> {
    let by_name = !given.contains('/') && LispKind::from_name(given).is_some();
    let as_started = config
        .lisp
        .as_ref()
        .is_some_and(|l| l.as_os_str() == std::ffi::OsStr::new(given));
    if !given.contains('/') && !by_name && !as_started {
        // A word that names no implementation.
        return Err(ImageChoiceError::NoLisp {
            given: given.to_string(),
            installed: installed_names(),
        });
    }
    if !by_name && !as_started && !allowed_path(given, config) {
        return Err(ImageChoiceError::NotAllowed {
            given: given.to_string(),
            installed: installed_names(),
        });
    }
    let path = crate::image::implementation::resolve(given, locate::which).ok_or_else(|| {
        ImageChoiceError::NoLisp {
            given: given.to_string(),
            installed: installed_names(),
        }
    })?;
    let kind = kind_named(Path::new(given)).or_else(|| kind_named(&path));
    Ok((path, kind))
}

/// Whether `given` is the path of a Lisp the server was started with
/// (`--lisp`, `--allow-lisp`), compared canonically.
fn allowed_path(given: &str, config: &ImageConfig) -> bool {
    let Ok(real) = Path::new(given).canonicalize() else {
        return false;
    };
    let started = config
        .lisp
        .as_ref()
        .and_then(|l| crate::image::implementation::resolve(&l.to_string_lossy(), locate::which));
    started
        .iter()
        .chain(config.allowed_lisps.iter())
        .any(|p| p.canonicalize().is_ok_and(|p| p == real))
}

/// The implementation a `lisp` value names: its short name, or its
/// executable's file name (`/usr/bin/ecl`).
pub fn kind_named(lisp: &Path) -> Option<LispKind> {
    LispKind::from_name(&lisp.to_string_lossy()).or_else(|| {
        lisp.file_name()
            .and_then(|f| LispKind::from_name(&f.to_string_lossy()))
    })
}

/// The name an image of `lisp` gets when none is given: its
/// implementation's name, else its executable's file name.
pub fn default_name(lisp: &str, kind: Option<LispKind>) -> String {
    match kind {
        Some(k) => k.name().to_string(),
        None => PathBuf::from(lisp)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| lisp.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("ecl"));
        assert!(valid_name("sbcl-2.4_b.1"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name("../x"));
        assert!(!valid_name(&"x".repeat(41)));
    }

    #[test]
    fn default_names() {
        assert_eq!(default_name("ecl", Some(LispKind::Ecl)), "ecl");
        assert_eq!(default_name("/opt/lisp/bin/mylisp", None), "mylisp");
    }
}
