//! Keys and paths: the cache directory, the key of a Lisp + Swank +
//! helpers combination, and where each of its files lives.

use std::path::{Path, PathBuf};

use super::CoreCache;
use crate::image::helpers::{self, fnv1a};
use crate::image::implementation::LispKind;
use crate::image::locate::SwankSource;
use crate::image::stamp::file_stamp;

/// Bumped when the shape of the scripts below changes.
pub(super) const SCRIPT_VERSION: &str = "4";

/// The cache directory for this user.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cl-mcp-server")
}

/// The name of a project's fasl directory under `<cache>/fasl/`: the
/// root's last component and a hash of its whole path. Each project's
/// image may write its own directory and no other.
pub fn project_key(root: &Path) -> String {
    let name: String = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let hash = fnv1a(0, root.as_os_str().as_encoded_bytes());
    format!("{name}-{hash:016x}")
}

/// Where `asdf-test-system`'s coverage reports of the project at `root`
/// go: `<cache>/coverage/<project_key>/`, one directory per system. The
/// image may write there (the sandbox grants it), as in its fasl dir.
pub fn coverage_dir(cache: &Path, root: &Path) -> PathBuf {
    cache.join("coverage").join(project_key(root))
}

impl CoreCache {
    /// Computes the keys (no files are touched). `quicklisp` is a
    /// `setup.lisp` to load before the helpers.
    pub fn new(
        dir: PathBuf,
        lisp: PathBuf,
        kind: LispKind,
        swank: SwankSource,
        quicklisp: Option<PathBuf>,
    ) -> CoreCache {
        let lisp_id = format!("{kind}:{}:{}", lisp.display(), file_stamp(&lisp));
        let swank_id = swank.fingerprint();
        let swank_key = format!(
            "{:016x}",
            fnv1a(fnv1a(0, lisp_id.as_bytes()), swank_id.as_bytes())
        );
        let ql_id = quicklisp
            .as_deref()
            .map(|p| format!("{}:{}", p.display(), file_stamp(p)))
            .unwrap_or_default();
        let all = format!(
            "{swank_key}:{}:{SCRIPT_VERSION}:{ql_id}",
            helpers::sources_hash()
        );
        let key = format!("{:016x}", fnv1a(7, all.as_bytes()));
        CoreCache {
            dir,
            lisp,
            kind,
            swank,
            quicklisp,
            swank_key,
            key,
            jail: std::sync::Arc::new(crate::image::jail::ProcessJail::none()),
        }
    }

    /// The cached core's path (it may not exist yet): a saved image, or
    /// for ECL and ABCL the directory of compiled fasls.
    pub fn core_path(&self) -> PathBuf {
        let name = match self.kind {
            LispKind::Sbcl => format!("sbcl-{}.core", self.key),
            LispKind::Clisp => format!("clisp-{}.mem", self.key),
            LispKind::Ccl => format!("ccl-{}.image", self.key),
            LispKind::Ecl | LispKind::Abcl => format!("{}-{}", self.kind, self.key),
        };
        self.dir.join(name)
    }

    /// Whether the cache entry is complete (a fasl directory is complete
    /// once its start script is in place, the last thing a build writes).
    pub fn cached(&self) -> bool {
        let core = self.core_path();
        if self.kind.saves_images() {
            core.is_file()
        } else {
            core.join("start.lisp").is_file()
        }
    }

    pub(super) fn swank_fasl_dir(&self) -> PathBuf {
        self.dir.join(format!("swank-fasl-{}/", self.swank_key))
    }

    /// The manifest of Swank's compiled files for starts from source.
    pub(super) fn swank_manifest_path(&self) -> PathBuf {
        self.dir
            .join(format!("swank-fasl-{}.manifest", self.swank_key))
    }

    pub(super) fn home_path(&self) -> PathBuf {
        self.dir.join(format!("sbcl-{}.home", self.key))
    }

    pub(super) fn src_dir(&self) -> PathBuf {
        self.dir.join(format!("src-{}", self.key))
    }

    /// The manifest of the entry: the hashes of what an image loads from it.
    pub(super) fn manifest_path(&self) -> PathBuf {
        let mut name = self
            .core_path()
            .file_name()
            .unwrap_or_default()
            .to_os_string();
        name.push(".manifest");
        self.dir.join(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_inputs() {
        let a = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let b = CoreCache::new(
            "/c".into(),
            "/bin/ls".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let c = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            None,
        );
        let d = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Sbcl,
            SwankSource::Asdf,
            Some("/etc/hostname".into()),
        );
        let e = CoreCache::new(
            "/c".into(),
            "/bin/sh".into(),
            LispKind::Ecl,
            SwankSource::Asdf,
            None,
        );
        assert_ne!(a.core_path(), d.core_path());
        assert!(e
            .core_path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ecl-"));
        assert_ne!(a.core_path(), b.core_path());
        assert_eq!(a.core_path(), c.core_path());
    }
}
