//! What a cache entry held when the server built it: the SHA-256 of every
//! file an image loads from it, written by the server (never by an image)
//! next to the entry, and checked before an image starts from it.
//!
//! A confined image cannot write the cache (the sandbox grants it only
//! its own project's fasl directory); an image under `--sandbox off` can
//! write whatever its user can, so the check is what keeps a core (or a
//! fasl) planted by one session from running in the next. Hashing a 40 MB
//! core takes ~25 ms here (SHA-NI); a file this process has already found
//! intact is not hashed again while its identity (device, inode, size,
//! modification and change times) is unchanged: no write, rename or
//! `utimes` leaves all of those as they were (the change time cannot be
//! set by a process).
//!
//! The manifest's lines: `<sha256 hex>  <path relative to the cache dir>`.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::image::ImageError;
use crate::sync::MutexExt;
use sha2::{Digest, Sha256};

/// A file's identity as the kernel keeps it: any change to the file, or
/// another file put in its place, changes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn identity(path: &Path) -> std::io::Result<Identity> {
    let m = std::fs::symlink_metadata(path)?;
    if !m.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(Identity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
    })
}

/// Files this process hashed and found as recorded, with their identity
/// then and the hash.
static VERIFIED: Mutex<Option<HashMap<PathBuf, (Identity, String)>>> = Mutex::new(None);

/// The SHA-256 of `path`'s contents, in hex (a symbolic link is refused:
/// the cache holds none).
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    if !file.metadata()?.is_file() || std::fs::symlink_metadata(path)?.is_symlink() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the manifest `manifest` for `files`: (the file to hash now, the
/// name it is recorded under, relative to `base`). Written under a
/// temporary name and renamed, so a reader sees a whole manifest or none.
pub fn write(manifest: &Path, files: &[(PathBuf, PathBuf)]) -> std::io::Result<()> {
    let mut text = String::new();
    for (file, name) in files {
        let sum = file_sha256(file)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", file.display())))?;
        text.push_str(&format!("{sum}  {}\n", name.display()));
    }
    let mut tmp = manifest.as_os_str().to_os_string();
    tmp.push(format!(".writing-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, manifest)
}

/// Checks every file the manifest names (relative to `base`) against its
/// recorded hash. `Err`: what does not match, in words.
pub fn verify(manifest: &Path, base: &Path) -> Result<(), ImageError> {
    let text = std::fs::read_to_string(manifest).map_err(|e| {
        ImageError::Cache(format!(
            "its manifest {} is unreadable ({e})",
            manifest.display()
        ))
    })?;
    let mut lines = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (sum, name) = line.split_once("  ").ok_or_else(|| {
            ImageError::Cache(format!("its manifest {} is damaged", manifest.display()))
        })?;
        let path = base.join(name);
        if Path::new(name).is_absolute() || name.split('/').any(|c| c == "..") {
            return Err(ImageError::Cache(format!(
                "its manifest {} names a file outside the cache",
                manifest.display()
            )));
        }
        verify_file(&path, sum)?;
        lines += 1;
    }
    if lines == 0 {
        return Err(ImageError::Cache(format!(
            "its manifest {} is empty",
            manifest.display()
        )));
    }
    Ok(())
}

fn verify_file(path: &Path, want: &str) -> Result<(), ImageError> {
    let id = identity(path).map_err(|e| ImageError::Cache(format!("{}: {e}", path.display())))?;
    {
        let verified = VERIFIED.guard();
        if let Some((seen, sum)) = verified.as_ref().and_then(|m| m.get(path)) {
            if *seen == id && sum == want {
                return Ok(());
            }
        }
    }
    let got =
        file_sha256(path).map_err(|e| ImageError::Cache(format!("{}: {e}", path.display())))?;
    if got != want {
        return Err(ImageError::Cache(format!(
            "{} is not the file the server built (SHA-256 {} where {} was recorded)",
            path.display(),
            &got[..16],
            &want[..want.len().min(16)]
        )));
    }
    // Identity read again after hashing: a change while hashing shows.
    if identity(path).ok() == Some(id) {
        VERIFIED
            .guard()
            .get_or_insert_with(HashMap::new)
            .insert(path.to_path_buf(), (id, got));
    }
    Ok(())
}

/// Every regular file under `dir` (recursively), sorted, leaving out
/// temporary files of killed compilations (`-tmp` in the name).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() && !e.file_name().to_string_lossy().contains("-tmp") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_fails_and_an_intact_one_passes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("e")).unwrap();
        std::fs::write(d.join("e/a.fasl"), "one").unwrap();
        std::fs::write(d.join("core"), vec![7u8; 3 << 20]).unwrap();
        let m = d.join("core.manifest");
        write(
            &m,
            &[
                (d.join("core"), "core".into()),
                (d.join("e/a.fasl"), "e/a.fasl".into()),
            ],
        )
        .unwrap();
        verify(&m, d).unwrap();
        // Same size, new contents (the change time moves, so it is hashed).
        std::fs::write(d.join("e/a.fasl"), "two").unwrap();
        let e = verify(&m, d).unwrap_err().to_string();
        assert!(e.contains("a.fasl") && e.contains("not the file"), "{e}");
        std::fs::write(d.join("e/a.fasl"), "one").unwrap();
        verify(&m, d).unwrap();
        std::fs::remove_file(d.join("core")).unwrap();
        assert!(verify(&m, d).is_err());
        std::fs::write(&m, "").unwrap();
        assert!(verify(&m, d).unwrap_err().to_string().contains("empty"));
        std::fs::write(&m, "00  ../x\n").unwrap();
        assert!(verify(&m, d).unwrap_err().to_string().contains("outside"));
        assert!(verify(&d.join("none"), d).is_err());
    }

    #[test]
    fn known_digest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(
            file_sha256(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
