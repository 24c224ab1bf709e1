//! Checks: an entry against its manifest, and an image started from a
//! plan in check mode.

use std::time::Instant;

use super::scripts::dies_with_parent;
use super::{CoreCache, LaunchPlan};
use crate::image::cache_manifest;
use crate::image::jail::Purpose;
use crate::image::ImageError;

impl CoreCache {
    /// The plan to start from the cached core, if it exists and every file
    /// of it is as the build recorded. `Err`: it exists but does not match
    /// (changed after the build: by an image under `--sandbox off`, say),
    /// in words; the caller discards it by building again ([`Self::build`]).
    pub fn cached_plan(&self) -> Result<Option<LaunchPlan>, ImageError> {
        if !self.cached() {
            return Ok(None);
        }
        self.verify()?;
        Ok(Some(self.plan_from(&self.core_path())))
    }

    /// Checks the entry against its manifest.
    pub fn verify(&self) -> Result<(), ImageError> {
        let started = Instant::now();
        let cpu = thread_cpu_us();
        let result = cache_manifest::verify(&self.manifest_path(), &self.dir);
        tracing::debug!(
            core = %self.core_path().display(),
            elapsed_us = started.elapsed().as_micros() as u64,
            cpu_us = thread_cpu_us().saturating_sub(cpu),
            ok = result.is_ok(),
            "checked the cache entry against its manifest"
        );
        result
    }
}

/// How long a cache check may take (ABCL's JVM and ECL's fasl loading
/// take seconds; a hung check is a failed one).
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts an image from `plan` in check mode (`CL_MCP_CACHE_CHECK=1`: it
/// checks that Swank, the helpers and the boot code are in place, prints
/// `CL-MCP-CACHE-OK` and exits). Returns how long it took, or the Lisp's
/// own words when it failed. `purpose`: [`Purpose::Build`] for an entry
/// being built (a strict image's rules read only the cache entries there
/// were when they were made), else [`Purpose::Ask`].
pub fn check_plan(
    plan: &LaunchPlan,
    timeout: std::time::Duration,
    purpose: Purpose,
) -> Result<std::time::Duration, ImageError> {
    let started = Instant::now();
    let mut cmd = std::process::Command::new(&plan.lisp);
    cmd.args(&plan.args)
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .env("CL_MCP_CACHE_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    dies_with_parent(&mut cmd);
    let jail = plan.jail.clone();
    let (status, stdout, stderr) = jail.run(purpose, &mut cmd, |cmd| {
        let mut child = cmd
            .spawn()
            .map_err(|e| ImageError::Cache(format!("cannot run {}: {e}", plan.lisp.display())))?;
        // Read both pipes on their own threads, so a chatty Lisp never blocks.
        let stdout = child.stdout.take().map(read_capped);
        let stderr = child.stderr.take().map(read_capped);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if started.elapsed() < timeout => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        Ok::<_, ImageError>((status, stdout, stderr))
    })?;
    let stdout = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    match status {
        Some(s) if s.success() && stdout.lines().any(|l| l.trim() == "CL-MCP-CACHE-OK") => {
            Ok(started.elapsed())
        }
        Some(s) => Err(ImageError::Cache(format!(
            "{} exited with {s}: {}",
            plan.lisp.display(),
            last_words(&stderr, &stdout)
        ))),
        None => Err(ImageError::Cache(format!(
            "{} did not finish its start within {} s: {}",
            plan.lisp.display(),
            timeout.as_secs(),
            last_words(&stderr, &stdout)
        ))),
    }
}

/// Reads a child's pipe to its end on a thread of its own (the first MiB
/// kept).
pub(super) fn read_capped<R: std::io::Read + Send + 'static>(
    pipe: R,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut pipe = pipe;
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if text.len() < 1 << 20 => text.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// The last lines a Lisp printed (standard error, else standard output),
/// the boot guard's report first when there is one.
pub(super) fn last_words(stderr: &str, stdout: &str) -> String {
    // The JVM's note that it read JDK_JAVA_OPTIONS (ABCL's every start)
    // says nothing of what went wrong; ABCL's boot guard reports on
    // standard output.
    let stderr: Vec<&str> = stderr
        .lines()
        .filter(|l| !(l.starts_with("NOTE: Picked up ") && l.contains("_OPTIONS")))
        .collect();
    let stdout: Vec<&str> = stdout.lines().collect();
    let both: Vec<&str> = stderr.iter().chain(stdout.iter()).copied().collect();
    if crate::image::last_words::has_boot_report(&both) {
        return crate::image::last_words::lisp_words(&both);
    }
    if stderr.iter().all(|l| l.trim().is_empty()) {
        crate::image::last_words::lisp_words(&stdout)
    } else {
        crate::image::last_words::lisp_words(&stderr)
    }
}

/// The calling thread's CPU time in µs (what the hash check costs, apart
/// from waiting for a core on a busy machine).
pub(super) fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) fills the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_words_prefer_the_boot_guards_report() {
        let err = "; some noise\ncl-mcp-boot: END-OF-FILE: end of file on #<stream> (while loading /c/swank-fasl-1/swank.fasl)\nmore\n";
        assert!(last_words(err, "").starts_with("cl-mcp-boot: END-OF-FILE"));
        assert_eq!(last_words("", ""), "(it printed nothing)");
        assert_eq!(last_words("", "a\nb"), "a\nb");
        // ABCL: the JVM's note on stderr, the report on stdout.
        let note = "NOTE: Picked up JDK_JAVA_OPTIONS: -XX:+UseSerialGC\n";
        let out = "; loading\ncl-mcp-boot: PROGRAM-ERROR: Odd number of keyword arguments. (while loading /c/prelude.lisp)\n";
        assert!(last_words(note, out).starts_with("cl-mcp-boot: PROGRAM-ERROR"));
        assert_eq!(last_words(note, "a\nb"), "a\nb");
    }
}
