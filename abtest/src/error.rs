//! The harness's one error type: a message that says what failed, where, and what to do.

use std::fmt;

/// A harness failure, with its context already in the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Adds context to any displayable error: `fs::read(p).context(|| format!("read {p}"))`.
pub trait Context<T> {
    /// Wraps the error as `"{what}: {error}"`.
    fn context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", what().into())))
    }
}

/// Builds an [`Error`] from a format string: `bail!("no pidfile at {}", p.display())`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error(format!($($arg)*)))
    };
}
