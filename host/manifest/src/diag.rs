//! Diagnostics: one problem, at one place in one file.

use std::fmt;
use std::path::PathBuf;

use crate::yaml::Pos;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The configuration is invalid.
    Error,
    /// Worth knowing; the configuration still loads (e.g. a document of unknown kind skipped).
    Warning,
}

/// A problem found while loading or validating, printed as `FILE:LINE:COL: error: MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as given to the loader joined with its path inside the config dir.
    pub file: PathBuf,
    /// Where in the file.
    pub pos: Pos,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, and where possible how to mend it.
    pub message: String,
}

impl Diagnostic {
    /// An error at `pos` in `file`.
    pub fn error(file: impl Into<PathBuf>, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            file: file.into(),
            pos,
            severity: Severity::Error,
            message: message.into(),
        }
    }

    /// A warning at `pos` in `file`.
    pub fn warning(file: impl Into<PathBuf>, pos: Pos, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, pos, message)
        }
    }

    /// Whether this is an error (not a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {level}: {}",
            self.file.display(),
            self.pos.line,
            self.pos.col,
            self.message
        )
    }
}
