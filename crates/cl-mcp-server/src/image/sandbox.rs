//! Confining a local image with Landlock.
//!
//! The ruleset is built in the server before the fork (opening the paths,
//! which allocates and may fail); the child only calls `prctl` and
//! `landlock_restrict_self` between fork and exec, both async-signal-safe
//! system calls. Everything the image runs (`run-program` children too)
//! inherits the domain.
//!
//! - `workspace`: reads anywhere; writes under the project root, the
//!   project's fasl dir in our cache (ASDF's output and `lisp-compile-file`'s
//!   go there), the temp dir and `--allow-write` dirs. Never our cache
//!   itself, ASDF's shared fasl cache or Quicklisp's dir: what a later image
//!   (of any session and sandbox mode) or the user's own Lisp loads; TCP: bind only (Swank's port-0 listener), connect
//!   only with `--allow-net` / `--allow-connect`.
//! - `strict`: as `workspace`, and reads limited to those dirs, the system
//!   dirs (`/usr`, `/lib*`, `/bin`, `/sbin`), the Lisp's install dir, a few
//!   files of `/etc`, ASDF's source registries and `--allow-read` dirs.
//!
//! Landlock filters TCP by port only, so `--allow-connect HOST:PORT` allows
//! that port on any host; UDP and pathname Unix sockets are not covered
//! (abstract Unix sockets and signals to processes outside are, ABI 6+).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::ImageError;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, NetPort, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};

/// `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// No confinement (as before the sandbox existed).
    Off,
    /// Writes and network confined; reads allowed. The default (on a kernel
    /// without Landlock it runs unconfined, and says so).
    #[default]
    Workspace,
    /// As workspace, and reads confined too.
    Strict,
}

impl SandboxMode {
    /// Parses `off`, `workspace` or `strict`.
    pub fn parse(s: &str) -> Option<SandboxMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Some(SandboxMode::Off),
            "workspace" => Some(SandboxMode::Workspace),
            "strict" => Some(SandboxMode::Strict),
            _ => None,
        }
    }

    /// The name the flag takes.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::Workspace => "workspace",
            SandboxMode::Strict => "strict",
        }
    }
}

/// The sandbox options of the command line.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// `--allow-write DIR` (repeatable).
    pub allow_write: Vec<PathBuf>,
    /// `--allow-read DIR` (repeatable; strict only).
    pub allow_read: Vec<PathBuf>,
    /// `--allow-net`: no network confinement.
    pub allow_net: bool,
    /// `--allow-connect HOST:PORT` (repeatable): the ports that may be connected to.
    pub allow_connect: Vec<u16>,
}

/// Parses `HOST:PORT` or `PORT` for `--allow-connect`: the port (Landlock
/// filters TCP by port only).
pub fn parse_connect(s: &str) -> Result<u16, ImageError> {
    let port = s.rsplit_once(':').map_or(s, |(_, p)| p);
    port.trim().parse::<u16>().map_err(|_| {
        ImageError::Sandbox(format!(
            "--allow-connect {s}: expected HOST:PORT or PORT, e.g. 127.0.0.1:5432"
        ))
    })
}

/// The Landlock ABI this kernel offers (0: none), asked once.
pub fn kernel_abi() -> i32 {
    static ABI_VERSION: OnceLock<i32> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // LANDLOCK_CREATE_RULESET_VERSION = 1 << 0.
        // SAFETY: with a null attribute pointer, size 0 and the VERSION flag
        // this only returns a number.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                1u32,
            )
        };
        if v < 0 {
            0
        } else {
            v as i32
        }
    })
}

/// Which Landlock ABI the rules are written for (the newest we vetted).
const TARGET_ABI: ABI = ABI::V7;

/// What the image was confined to, for `image-info` and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReport {
    pub mode: SandboxMode,
    /// True when the kernel enforces the rules (Landlock present).
    pub enforced: bool,
    /// The kernel's Landlock ABI (0: none).
    pub abi: i32,
    /// Where the image may write.
    pub write: Vec<PathBuf>,
    /// Where it may read (`None`: everywhere).
    pub read: Option<Vec<PathBuf>>,
    /// The network rule in words.
    pub network: String,
    /// Why the sandbox is weaker than asked, if it is.
    pub warning: Option<String>,
}

impl SandboxReport {
    /// One paragraph: the mode and its rules.
    pub fn describe(&self) -> String {
        if self.mode == SandboxMode::Off {
            return "sandbox: off (the image runs with your full rights; --sandbox workspace confines it)"
                .into();
        }
        let mut s = format!(
            "sandbox: {}{} (Landlock ABI {})",
            self.mode.as_str(),
            if self.enforced { "" } else { ", NOT enforced" },
            self.abi
        );
        let list = |v: &[PathBuf]| {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        s.push_str(&format!("\n  write: {}", list(&self.write)));
        match &self.read {
            None => s.push_str("\n  read: everywhere"),
            Some(r) => s.push_str(&format!("\n  read: {}", list(r))),
        }
        s.push_str(&format!("\n  network: {}", self.network));
        if let Some(w) = &self.warning {
            s.push_str(&format!("\n  warning: {w}"));
        }
        s
    }
}

/// Where the image's files live, for the rules.
pub struct Places<'a> {
    pub root: &'a Path,
    /// The server's cache: readable, never writable.
    pub cache: &'a Path,
    /// The project's fasl directory inside the cache: writable.
    pub fasl: &'a Path,
    /// The project's coverage reports inside the cache: writable.
    pub coverage: &'a Path,
    /// The image's temp dir: the system's, or a private one under it when
    /// the cache lies there (`places::image_temp_dir`).
    pub temp: &'a Path,
    pub lisp: &'a Path,
    pub swank_loader: Option<&'a Path>,
}

/// A ruleset ready to be applied in the child (or nothing to apply).
pub struct Confinement {
    fd: Option<OwnedFd>,
    pub report: SandboxReport,
}

impl Confinement {
    /// The ruleset's descriptor to pass to [`restrict_in_child`].
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Whether reads are confined, so the child must grant itself its own
    /// `/proc/<pid>` (see [`restrict_in_child`]).
    pub fn own_proc(&self) -> bool {
        self.report.read.is_some()
    }
}

/// The environment a `strict` image gets: only these variables of the
/// server's (and the `LC_*` ones), so a secret in the server's environment
/// (a token, a key) does not reach code the image runs. `None`: the whole
/// environment (`workspace`, `off`).
pub fn image_environment(
    mode: SandboxMode,
) -> Option<Vec<(std::ffi::OsString, std::ffi::OsString)>> {
    const KEPT: &[&str] = &[
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "SBCL_HOME",
        "CL_SOURCE_REGISTRY",
        "ASDF_OUTPUT_TRANSLATIONS",
        "JAVA_HOME",
        "JDK_JAVA_OPTIONS",
        "LD_LIBRARY_PATH",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_DATA_DIRS",
        "XDG_CONFIG_DIRS",
        "XDG_RUNTIME_DIR",
        "ECLDIR",
    ];
    (mode == SandboxMode::Strict).then(|| {
        std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                KEPT.contains(&k.as_ref()) || k.starts_with("LC_")
            })
            .collect()
    })
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn xdg(var: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(fallback)))
}

/// The directories the image may write to in `workspace` and `strict`
/// (existing ones, canonical, deduplicated). Not the server's cache (its
/// cores, Swank's fasls and their manifests: what every later image loads)
/// nor ASDF's shared fasl cache or Quicklisp's directory (what every Lisp
/// of the user loads): only the project's own fasl directory there, where
/// the image's ASDF and `lisp-compile-file` put their output, and its
/// coverage directory, where `sb-cover` writes its HTML report.
pub fn write_dirs(cfg: &SandboxConfig, places: &Places) -> Vec<PathBuf> {
    let mut dirs = vec![
        places.root.to_path_buf(),
        places.fasl.to_path_buf(),
        places.coverage.to_path_buf(),
    ];
    dirs.push(places.temp.to_path_buf());
    dirs.push(PathBuf::from("/dev/shm"));
    dirs.extend(cfg.allow_write.iter().cloned());
    canonical_existing(dirs)
}

/// Device files every program may write (`/dev/null` for `run-program`'s
/// discarded output, and so on).
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// The directories the image may read in `strict` (besides where it may write).
pub fn read_dirs(cfg: &SandboxConfig, places: &Places) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/usr",
        "/lib",
        "/lib64",
        "/lib32",
        "/bin",
        "/sbin",
        "/dev/urandom",
        "/dev/random",
        "/sys/devices/system/cpu",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/etc/common-lisp",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    // /proc, but no process's directory: the image's own is granted in the
    // child (`restrict_in_child`), so it reads neither the server's
    // environment, maps or command line nor any other process's.
    dirs.extend(proc_entries_of_no_process());
    // The Lisp's install dir (`.../bin/sbcl` → `...`), and SBCL_HOME.
    if let Ok(real) = places.lisp.canonicalize() {
        if let Some(prefix) = real.parent().and_then(Path::parent) {
            if prefix.parent().is_some() {
                dirs.push(prefix.to_path_buf());
            }
        }
    }
    if let Some(h) = std::env::var_os("SBCL_HOME").filter(|v| !v.is_empty()) {
        dirs.push(PathBuf::from(h));
    }
    if let Some(dir) = places.swank_loader.and_then(Path::parent) {
        dirs.push(dir.to_path_buf());
    }
    // ASDF's source registries and configuration.
    if let Some(data) = xdg("XDG_DATA_HOME", ".local/share") {
        dirs.push(data.join("common-lisp"));
    }
    if let Some(config) = xdg("XDG_CONFIG_HOME", ".config") {
        dirs.push(config.join("common-lisp"));
    }
    if let Some(h) = home() {
        dirs.push(h.join("common-lisp"));
    }
    // The cores and fasls the image starts from (read-only: see
    // write_dirs), but not other projects' fasls and coverage reports
    // (their compiled code and, in the reports, their whole source): of
    // those two directories only the project's own, which write_dirs grants.
    dirs.extend(cache_entries_but_projects(places.cache));
    dirs.extend(cfg.allow_read.iter().cloned());
    canonical_existing(dirs)
}

/// The entries of the cache directory but its per-project ones (`fasl`,
/// `coverage`).
fn cache_entries_but_projects(cache: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| !PROJECT_DIRS.iter().any(|d| e.file_name() == *d))
        .map(|e| e.path())
        .collect()
}

/// The cache's directories that hold one subdirectory per project.
const PROJECT_DIRS: &[&str] = &["fasl", "coverage"];

/// Refuses a cache the image could write: inside a directory the image
/// may write (the project root, `--allow-write`, `/dev/shm`; the temp dir
/// is narrowed instead, see `places::image_temp_dir`), or holding one, but for
/// the project's own fasl and coverage directories. A core planted there
/// would run in every later image, of any project and sandbox mode.
pub fn check_cache_apart(write: &[PathBuf], places: &Places) -> Result<(), ImageError> {
    let Ok(cache) = places.cache.canonicalize() else {
        return Ok(());
    };
    let own: Vec<PathBuf> = [places.fasl, places.coverage]
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    for w in write {
        if own.contains(w) {
            continue;
        }
        if cache.starts_with(w) || w.starts_with(&cache) {
            return Err(ImageError::Sandbox(format!(
                "the server's cache {} lies {} {}, where the image may write: an image could \
                 rewrite the cores and fasls every later image loads. Put the cache elsewhere \
                 (--cache-dir DIR or XDG_CACHE_HOME, outside the project and the --allow-write \
                 dirs), or start the server in the project's own directory (--project-root).",
                cache.display(),
                if cache.starts_with(w) {
                    "inside"
                } else {
                    "around"
                },
                w.display()
            )));
        }
    }
    Ok(())
}

/// The entries of `/proc` that belong to no process: not the numbered
/// directories, and not the symbolic links (`self`, `mounts`, `net`, …),
/// which lead into the directory of whoever opens them (the server, here).
fn proc_entries_of_no_process() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.bytes().all(|b| b.is_ascii_digit())
                && e.file_type().is_ok_and(|t| !t.is_symlink())
        })
        .map(|e| e.path())
        .collect()
}

fn canonical_existing(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if let Ok(c) = d.canonicalize() {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// Builds the ruleset for `cfg` (in the server, before the fork). `Err`:
/// the image must not start (strict without Landlock, a cache the image
/// could write, or a ruleset error).
pub fn prepare(cfg: &SandboxConfig, places: &Places) -> Result<Confinement, ImageError> {
    prepare_with(cfg, places, false)
}

/// The ruleset of a process that builds the image's cache entry: the
/// image's, and the cache writable (where it saves the core or fasls).
pub fn prepare_for_build(cfg: &SandboxConfig, places: &Places) -> Result<Confinement, ImageError> {
    prepare_with(cfg, places, true)
}

fn prepare_with(
    cfg: &SandboxConfig,
    places: &Places,
    builds: bool,
) -> Result<Confinement, ImageError> {
    let abi = kernel_abi();
    if cfg.mode == SandboxMode::Off {
        return Ok(Confinement {
            fd: None,
            report: SandboxReport {
                mode: SandboxMode::Off,
                enforced: false,
                abi,
                write: Vec::new(),
                read: None,
                network: "unrestricted".into(),
                warning: None,
            },
        });
    }
    let mut write = write_dirs(cfg, places);
    check_cache_apart(&write, places)?;
    if builds {
        write.extend(canonical_existing(vec![places.cache.to_path_buf()]));
    }
    let read = (cfg.mode == SandboxMode::Strict).then(|| read_dirs(cfg, places));
    let network = if cfg.allow_net {
        "unrestricted (--allow-net)".to_string()
    } else if cfg.allow_connect.is_empty() {
        "no TCP connections (listening only: Swank's own listener); UDP and pathname Unix \
         sockets are not filtered by Landlock"
            .to_string()
    } else {
        format!(
            "TCP connections only to port{} {} (any host: Landlock filters by port)",
            if cfg.allow_connect.len() == 1 {
                ""
            } else {
                "s"
            },
            cfg.allow_connect
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let broad = write.iter().find(|w| {
        w.parent().is_none() || home().and_then(|h| h.canonicalize().ok()).as_ref() == Some(*w)
    });
    let mut report = SandboxReport {
        mode: cfg.mode,
        enforced: abi >= 1,
        abi,
        write: write.clone(),
        read: read.clone(),
        network,
        warning: broad.map(|w| {
            format!(
                "the image may write under {}, which holds far more than a project (start the \
                 server in the project's directory or pass --project-root)",
                w.display()
            )
        }),
    };
    if abi < 1 {
        if cfg.mode == SandboxMode::Strict {
            return Err(ImageError::Sandbox(
                "--sandbox strict: this kernel has no Landlock (it is too old or Landlock is \
                 not enabled at boot: add `lsm=...,landlock` to the kernel command line), so \
                 the image would run unconfined; refusing to start it. Use --sandbox workspace \
                 or off to run without confinement."
                    .into(),
            ));
        }
        report.warning = Some(
            "this kernel has no Landlock: the image runs UNCONFINED (a kernel of Linux 6.7 or \
             later with Landlock enabled confines it)"
                .into(),
        );
        return Ok(Confinement { fd: None, report });
    }
    if abi < 4 && !cfg.allow_net {
        if cfg.mode == SandboxMode::Strict {
            return Err(ImageError::Sandbox(format!(
                "--sandbox strict: this kernel's Landlock (ABI {abi}) cannot confine the \
                 network (ABI 4, Linux 6.7, can); refusing to start the image. Add --allow-net \
                 to run strict with the network open, or use --sandbox workspace."
            )));
        }
        report.warning = Some(format!(
            "this kernel's Landlock (ABI {abi}) confines files but not the network (ABI 4, \
             Linux 6.7, does)"
        ));
        report.network = "unrestricted (kernel too old to confine it)".into();
    }
    build(cfg, &write, read.as_deref(), abi)
        .map(|fd| Confinement {
            fd: Some(fd),
            report,
        })
        .map_err(|e: ImageError| {
            ImageError::Sandbox(format!("cannot build the image's Landlock sandbox: {e}"))
        })
}

fn build(
    cfg: &SandboxConfig,
    write: &[PathBuf],
    read: Option<&[PathBuf]>,
    abi: i32,
) -> Result<OwnedFd, ImageError> {
    build_ruleset(cfg, write, read, abi)
        .map_err(|e| ImageError::Sandbox(e.to_string()))?
        .ok_or_else(|| ImageError::Sandbox("Landlock gave no ruleset".to_string()))
}

fn build_ruleset(
    cfg: &SandboxConfig,
    write: &[PathBuf],
    read: Option<&[PathBuf]>,
    abi: i32,
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read_access = AccessFs::from_read(TARGET_ABI);
    let mut ruleset = Ruleset::default().handle_access(all)?;
    if !cfg.allow_net && abi >= 4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::from_all(TARGET_ABI))?;
    }
    // Everything handled is denied unless a rule grants it; the rules
    // below never grant creating device nodes (a root image could otherwise
    // make a node for the host's disk or memory in a writable directory).
    let writes = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let mut created = ruleset.create()?;
    match read {
        None => created = created.add_rules(path_beneath_rules(["/"], read_access))?,
        Some(dirs) => created = created.add_rules(path_beneath_rules(dirs, read_access))?,
    }
    created = created.add_rules(path_beneath_rules(write, writes))?;
    created = created.add_rules(path_beneath_rules(WRITABLE_DEVICES, writes))?;
    if !cfg.allow_net && abi >= 4 {
        // Port 0: binding lets the kernel pick an ephemeral port (Swank's
        // listener); connections only to the allowed ports.
        created = created.add_rule(NetPort::new(0, AccessNet::BindTcp))?;
        for port in &cfg.allow_connect {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
    }
    Ok(created.into())
}

/// `capset(2)`'s header and data (version 3: two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability of the calling process for good: the bounding
/// set (so no exec can regain one; needs CAP_SETPCAP, which only a root
/// server has: a non-root one holds no capabilities anyway, and the
/// failures are ignored), the ambient set, then the effective, permitted
/// and inheritable sets. With `no_new_privs` set, an exec then grants none,
/// even to a root image. Only system calls (called between fork and exec).
fn drop_capabilities() -> std::io::Result<()> {
    // SAFETY: plain system calls with integer arguments, and capset with
    // pointers to two live, correctly laid out structures.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `struct landlock_path_beneath_attr` (packed, as the kernel declares it).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// LANDLOCK_ACCESS_FS_EXECUTE | READ_FILE | READ_DIR (ABI 1).
const READ_ACCESS_BITS: u64 = 1 | (1 << 2) | (1 << 3);
/// LANDLOCK_RULE_PATH_BENEATH.
const RULE_PATH_BENEATH: libc::c_int = 1;

/// Grants the calling process reading its own `/proc/<pid>` in the
/// ruleset `fd` (`/proc/self` opened here, in the child, is the child's:
/// in the server it would be the server's). Only system calls.
fn grant_own_proc(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: open(2) of a static NUL-terminated path; landlock_add_rule(2)
    // with a pointer to a live attribute struct; close(2) of our own fd.
    unsafe {
        let own = libc::open(
            c"/proc/self".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if own < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: READ_ACCESS_BITS,
            parent_fd: own,
        };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            fd,
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(own);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Applies the ruleset `fd` to the calling process, after dropping every
/// capability (a root server's image would otherwise run with all of
/// them); with `own_proc` (reads confined), first grants reading its own
/// `/proc/<pid>`. Called in the child between fork and exec: only
/// async-signal-safe system calls.
pub fn restrict_in_child(fd: RawFd, own_proc: bool) -> std::io::Result<()> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if own_proc {
        grant_own_proc(fd)?;
    }
    drop_capabilities()?;
    // SAFETY: landlock_restrict_self(2) with integer arguments only: the
    // ruleset descriptor the parent keeps open until the spawn, no flags.
    unsafe {
        if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The `[SANDBOX]` line for an evaluation result whose text shows a refused
/// file operation or connection, or `None`.
pub fn refusal_hint(report: &SandboxReport, text: &str) -> Option<String> {
    if report.mode == SandboxMode::Off || !report.enforced {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let denied = lower.contains("permission denied");
    if !denied {
        return None;
    }
    let net = lower.contains("socket") || lower.contains("connect");
    let flag = if net {
        "--allow-connect HOST:PORT (or --allow-net)"
    } else if report.mode == SandboxMode::Strict {
        "--allow-write DIR (writes) or --allow-read DIR (reads)"
    } else {
        "--allow-write DIR"
    };
    Some(format!(
        "[SANDBOX] the image runs with --sandbox {}: this may be the sandbox refusing a {} \
         outside its rules (image-info lists them); the server's {flag} allows it, or --sandbox off.",
        report.mode.as_str(),
        if net { "connection" } else { "file access" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(mode: SandboxMode, enforced: bool) -> SandboxReport {
        SandboxReport {
            mode,
            enforced,
            abi: 7,
            write: vec![PathBuf::from("/p")],
            read: None,
            network: String::new(),
            warning: None,
        }
    }

    #[test]
    fn connect_takes_host_port_or_port() {
        assert_eq!(parse_connect("127.0.0.1:5432"), Ok(5432));
        assert_eq!(parse_connect("[::1]:80"), Ok(80));
        assert_eq!(parse_connect("443"), Ok(443));
        assert!(parse_connect("example.org").is_err());
        assert!(parse_connect("h:70000").is_err());
    }

    #[test]
    fn modes_parse() {
        assert_eq!(SandboxMode::parse("Strict"), Some(SandboxMode::Strict));
        assert_eq!(
            SandboxMode::parse("workspace"),
            Some(SandboxMode::Workspace)
        );
        assert_eq!(SandboxMode::parse("off"), Some(SandboxMode::Off));
        assert_eq!(SandboxMode::parse("on"), None);
    }

    #[test]
    fn hint_names_the_flag_and_only_when_confined() {
        let file = "Error opening #P\"/x\": Permission denied";
        let h = refusal_hint(&report(SandboxMode::Workspace, true), file).unwrap();
        assert!(
            h.starts_with("[SANDBOX]") && h.contains("--allow-write DIR"),
            "{h}"
        );
        let h = refusal_hint(&report(SandboxMode::Strict, true), file).unwrap();
        assert!(h.contains("--allow-read DIR"), "{h}");
        let net = "Socket error in \"connect\": EACCES (Permission denied)";
        let h = refusal_hint(&report(SandboxMode::Workspace, true), net).unwrap();
        assert!(h.contains("--allow-connect"), "{h}");
        assert_eq!(refusal_hint(&report(SandboxMode::Off, false), file), None);
        assert_eq!(
            refusal_hint(&report(SandboxMode::Workspace, false), file),
            None
        );
        assert_eq!(
            refusal_hint(&report(SandboxMode::Workspace, true), "No such file"),
            None
        );
    }
}
