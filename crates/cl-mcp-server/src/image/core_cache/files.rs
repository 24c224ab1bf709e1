//! Files the cache writes: private directories, atomic rewrites.

use std::path::{Path, PathBuf};

/// `dir`, created (with its parents) if missing, as a directory only we can
/// enter: compiled fasls are loaded back, so no other user may plant a file
/// or a symbolic link there. Refuses a symbolic link or a directory owned by
/// someone else; tightens our own directory's mode to 0700.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of ours (a symbolic link, or owned by another user)",
            dir.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(dir.to_path_buf())
}

pub(super) fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    // Write then rename, so a concurrent reader never loads half a file;
    // the temporary name unique to this call, not only to this process (an
    // ECL cold start writes the same sources from the start and from its
    // background build at once: with one name per process, one rename
    // found the other's file gone, "No such file or directory").
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads of one process writing the same file at once (an ECL cold
    /// start and its background build) all succeed.
    #[test]
    fn concurrent_rewrites_in_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prelude.lisp");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for j in 0..200 {
                        // Alternating texts, so every call writes.
                        write_if_changed(&path, &format!("text {}", (i + j) % 2)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    }
}
