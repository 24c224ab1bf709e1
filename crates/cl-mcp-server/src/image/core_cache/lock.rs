//! The build lock (`build.lock`): concurrent servers build once.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::image::ImageError;

/// How long a build waits for another's `build.lock` before it builds
/// without it: longer than any build takes (ECL compiles Swank through gcc
/// in minutes), short of forever — anyone who can open the file can hold
/// the lock (a confined image can read the cache).
pub(super) const BUILD_LOCK_WAIT: Duration = Duration::from_secs(600);

/// The cache's build lock, taken within `wait`: the open file (the lock
/// lives as long as it) and whether it is held. Past `wait`, or where the
/// filesystem has no locks, the build goes on without it, said in the log.
pub(super) fn take_build_lock(
    dir: &Path,
    wait: Duration,
) -> Result<(std::fs::File, bool), ImageError> {
    let lock = std::fs::File::create(dir.join("build.lock"))
        .map_err(|e| ImageError::Cache(format!("cannot create lock file: {e}")))?;
    let since = Instant::now();
    let mut said = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok((lock, true)),
            Err(std::fs::TryLockError::WouldBlock) if since.elapsed() < wait => {
                if !said && since.elapsed() > Duration::from_secs(5) {
                    tracing::info!(dir = %dir.display(), "waiting for another build of the Lisp cache to finish");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::warn!(dir = %dir.display(), waited_s = since.elapsed().as_secs(), "the cache's build lock is still held; building without it");
                return Ok((lock, false));
            }
            Err(std::fs::TryLockError::Error(_)) => return Ok((lock, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder of `build.lock` that never lets go (anyone who can open the
    /// file can hold it, a confined image too) delays a build by the wait,
    /// not forever; a free lock is taken at once.
    #[test]
    fn a_held_build_lock_is_waited_for_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (first, held) = take_build_lock(dir.path(), Duration::from_secs(1)).unwrap();
        assert!(held);
        let t = Instant::now();
        let (_second, held) = take_build_lock(dir.path(), Duration::from_millis(300)).unwrap();
        assert!(!held, "the lock was taken twice");
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(first);
        let (_third, held) = take_build_lock(dir.path(), Duration::from_millis(300)).unwrap();
        assert!(held);
    }
}
