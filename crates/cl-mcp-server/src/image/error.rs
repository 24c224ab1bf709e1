//! The image layer's one error type.
//!
//! Every variant carries the words a user reads (its `Display`), already
//! saying what was wrong and what to do; the variant says which part of the
//! image layer failed, so a caller can tell a refused start from a dead
//! image without reading the words.

/// Why an image call (or a step of preparing one) failed. Lisp errors are
/// not these: they come back as data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The Lisp or Swank could not be found.
    #[error("{0}")]
    NotFound(String),
    /// The image could not be started or connected to.
    #[error("{0}")]
    StartFailed(String),
    /// The image died (or the attached connection dropped) during the call.
    #[error("{0}")]
    Died(String),
    /// Too many deaths in a short time: not restarting automatically.
    #[error("{0}")]
    CrashLoop(String),
    /// The operation is not allowed on an attached image.
    #[error("{0}")]
    Attached(String),
    /// A Swank protocol problem on a live connection.
    #[error("{0}")]
    Protocol(String),
    /// A limit of the server (`--max-images`) refuses a new image now.
    #[error("{0}")]
    Limit(String),
    /// A binary that is no Lisp this server knows, or whose `--version`
    /// could not be read (`implementation`).
    #[error("{0}")]
    Implementation(String),
    /// The core cache could not be built, checked or used (`core_cache`,
    /// `cache_manifest`); the image then starts from source.
    #[error("{0}")]
    Cache(String),
    /// The sandbox could not be set up, or an allowance is malformed
    /// (`sandbox`).
    #[error("{0}")]
    Sandbox(String),
    /// A cgroup for the image's caps could not be made (`limits`); the caps
    /// then fall back to what a process can set itself.
    #[error("{0}")]
    Cgroup(String),
}
