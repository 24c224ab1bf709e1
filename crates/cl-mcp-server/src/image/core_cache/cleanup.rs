//! Healing and cleaning: discarding an entry, clearing what killed builds
//! left, pruning entries of other keys.

use std::path::Path;

use super::CoreCache;

impl CoreCache {
    /// Removes this key's entries: the saved image or fasl directory, the
    /// sources and scripts, and Swank's compiled files.
    pub fn discard(&self) {
        for p in [
            self.manifest_path(),
            self.swank_manifest_path(),
            self.core_path(),
            self.home_path(),
            self.src_dir(),
            self.swank_fasl_dir(),
        ] {
            remove_entry(&p);
        }
    }

    /// Removes the temporary cores and fasl directories of builds that
    /// were killed (the caller holds the build lock).
    pub(super) fn remove_dead_builds(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = ["sbcl-", "clisp-", "ccl-", "ecl-", "abcl-"]
                .iter()
                .any(|p| name.starts_with(p));
            if name.starts_with("swank-fasl-") {
                remove_dead_fasls(&e.path());
                continue;
            }
            if name.starts_with("src-") {
                remove_dead_scripts(&e.path());
                continue;
            }
            if ours && name.contains(".tmp-") {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }

    /// Removes cores and source dirs of other keys (older Lisp, Swank or
    /// helper versions) not touched for a day: a server of another version
    /// may still run, and a fresh core of theirs must not vanish under them.
    pub(super) fn prune_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let day = std::time::Duration::from_secs(24 * 3600);
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = ["sbcl-", "src-", "clisp-", "ccl-", "ecl-", "abcl-"]
                .iter()
                .any(|p| name.starts_with(p));
            if !ours || name.contains(&self.key) {
                continue;
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > day);
            if old {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                tracing::info!(path = %p.display(), "removed a stale core cache entry");
            }
        }
    }
}

/// Removes the temporary fasls (`NAME-tmpXXXX.TYPE`, see prelude.lisp's
/// COMPILE-ATOMICALLY) that killed compilations left under `dir`, once
/// they are ten minutes old: a start from source (which holds no lock) may
/// be writing a young one.
pub(super) fn remove_dead_fasls(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let old = std::time::Duration::from_secs(600);
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            remove_dead_fasls(&p);
        } else if e.file_name().to_string_lossy().contains("-tmp")
            && meta
                .modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > old)
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Removes the build scripts (`build-<pid>.lisp`) of builds whose server
/// is gone (a killed build leaves its script behind).
pub(super) fn remove_dead_scripts(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("build-")
            .and_then(|n| n.strip_suffix(".lisp"))
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill(2) with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes a file or directory, whichever `p` is (nothing when absent).
pub fn remove_entry(p: &Path) {
    let _ = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::implementation::LispKind;
    use crate::image::locate::SwankSource;

    #[test]
    fn killed_builds_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("ecl-k.tmp-1")).unwrap();
        std::fs::write(d.join("ecl-k.tmp-1/a.fas"), "").unwrap();
        std::fs::write(d.join("sbcl-k.core.tmp-2"), "").unwrap();
        std::fs::create_dir(d.join("src-k")).unwrap();
        std::fs::write(d.join("clisp-k.mem"), "").unwrap();
        let c = CoreCache::new(
            d.into(),
            "/bin/sh".into(),
            LispKind::Ecl,
            SwankSource::Asdf,
            None,
        );
        // A killed build's script (its pid is no process: above pid_max).
        std::fs::write(d.join("src-k/build-2147483000.lisp"), "").unwrap();
        std::fs::write(
            d.join("src-k")
                .join(format!("build-{}.lisp", std::process::id())),
            "",
        )
        .unwrap();
        c.remove_dead_builds();
        let scripts: Vec<String> = std::fs::read_dir(d.join("src-k"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(scripts, [format!("build-{}.lisp", std::process::id())]);
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["clisp-k.mem", "src-k"]);
    }
}
