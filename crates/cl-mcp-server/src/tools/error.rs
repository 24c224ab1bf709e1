//! The tools layer's error. Each variant says what kind of thing went
//! wrong and carries the words the user reads: its `Display` is the text of
//! the tool's `isError` result, unchanged from what the tool answered when
//! errors were plain strings.

/// Why a tool's work could not be done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// An argument was refused (out of range, too deeply nested, not of
    /// the form asked for); nothing was sent to the image.
    #[error("{0}")]
    Argument(String),
    /// The image could not run the call (not started, dead, aborted the
    /// request, did not stop when interrupted).
    #[error("{0}")]
    Image(String),
    /// A Lisp helper refused the call with its own words (its `(:error
    /// MESSAGE)`: a name that does not resolve, a restart that is not there).
    #[error("{0}")]
    Lisp(String),
    /// The call never ran: its time ran out, or it was cancelled, while it
    /// waited for its turn or for the image to start.
    #[error("{0}")]
    NotRun(String),
    /// The debugger a call names is not there, or not in a state to do it.
    #[error("{0}")]
    Debugger(String),
    /// An edit was refused: its target is not there (or not one form),
    /// or `content`, or the file after the edit, would not read as it
    /// should. Nothing was written.
    #[error("{0}")]
    Edit(String),
    /// A file could not be resolved, opened, read or written.
    #[error("{0}")]
    File(String),
}

/// A tool's result text (`ToolOutput::error`) is the error's words.
impl From<ToolError> for String {
    fn from(e: ToolError) -> Self {
        e.to_string()
    }
}
