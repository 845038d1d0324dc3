//! The one error type of the crate.
//!
//! Every failure a user can cause maps to exactly one [`ErrorKind`], and every kind maps to one
//! documented exit code (kxen-agent.md §2). Errors carry the file or id involved in their message
//! and, where there is a next step, a hint naming the exact command to run.

use std::fmt;
use std::path::Path;

/// What went wrong, as far as a caller (and the exit code) is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A run ended `failed`, or an unexpected internal failure (exit 1).
    Failed,
    /// The command line is wrong (exit 2).
    Usage,
    /// A session, run, operation, message or file does not exist (exit 3).
    NotFound,
    /// A user file (YAML, policy, config, bundle, plan) is invalid (exit 4).
    InvalidInput,
    /// A lease is held, a workspace does not match, a session exists already (exit 5).
    Conflict,
    /// Refused by policy: drift, a denied required capability (exit 6).
    Policy,
    /// A run needs a human: UNKNOWN tool outcomes (exit 7).
    InputRequired,
    /// A budget (turns, wall clock) is exhausted (exit 8).
    Budget,
    /// A model provider, git or another external program failed (exit 9).
    External,
    /// State on disk is damaged (exit 10).
    Corrupt,
    /// The user canceled (exit 130).
    Canceled,
}

impl ErrorKind {
    /// Every kind, in exit-code order (for documentation and tests).
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::Failed,
        ErrorKind::Usage,
        ErrorKind::NotFound,
        ErrorKind::InvalidInput,
        ErrorKind::Conflict,
        ErrorKind::Policy,
        ErrorKind::InputRequired,
        ErrorKind::Budget,
        ErrorKind::External,
        ErrorKind::Corrupt,
        ErrorKind::Canceled,
    ];

    /// The process exit code of kxen-agent.md §2.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Failed => 1,
            ErrorKind::Usage => 2,
            ErrorKind::NotFound => 3,
            ErrorKind::InvalidInput => 4,
            ErrorKind::Conflict => 5,
            ErrorKind::Policy => 6,
            ErrorKind::InputRequired => 7,
            ErrorKind::Budget => 8,
            ErrorKind::External => 9,
            ErrorKind::Corrupt => 10,
            ErrorKind::Canceled => 130,
        }
    }

    /// The stable camelCase name used in `{"type":"error","kind":…}` lines.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Failed => "failed",
            ErrorKind::Usage => "usage",
            ErrorKind::NotFound => "notFound",
            ErrorKind::InvalidInput => "invalidInput",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Policy => "policy",
            ErrorKind::InputRequired => "inputRequired",
            ErrorKind::Budget => "budget",
            ErrorKind::External => "external",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Canceled => "canceled",
        }
    }

    /// One line for the exit-code table in README and `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorKind::Failed => "run failed (or an internal error)",
            ErrorKind::Usage => "usage error",
            ErrorKind::NotFound => "not found (session, run, operation, message, file)",
            ErrorKind::InvalidInput => "invalid input (YAML, policy, config, bundle, plan)",
            ErrorKind::Conflict => "conflict (lease held, workspace mismatch, already exists)",
            ErrorKind::Policy => "refused by policy (drift, denied capability)",
            ErrorKind::InputRequired => "input required (UNKNOWN tool outcomes)",
            ErrorKind::Budget => "budget exhausted",
            ErrorKind::External => "external failure (model provider, git, a program)",
            ErrorKind::Corrupt => "corrupt state",
            ErrorKind::Canceled => "canceled",
        }
    }
}

/// The crate's error: a kind, a message that names the file or id involved, and optional hints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// Next steps, each ideally an exact command (`run kxen-agent run show ses_… run_…`).
    pub hints: Vec<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The message goes through [`crate::redact`]: an error may reach stderr, events and run
    /// records, and no credential may.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: crate::redact::redact(&message.into()),
            hints: Vec::new(),
        }
    }

    /// Adds a hint line (`hint: …` on stderr), redacted like the message.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(crate::redact::redact(&hint.into()));
        self
    }

    pub fn failed(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, m)
    }
    pub fn usage(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, m)
    }
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, m)
    }
    pub fn policy(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Policy, m)
    }
    pub fn input_required(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::InputRequired, m)
    }
    pub fn budget(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Budget, m)
    }
    pub fn external(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::External, m)
    }
    pub fn corrupt(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, m)
    }
    pub fn canceled(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Canceled, m)
    }

    /// An I/O failure on `path`. A missing file is `NotFound`; anything else is `Failed`
    /// (the operating system refused: permissions, disk full, …).
    pub fn io(action: &str, path: &Path, err: std::io::Error) -> Self {
        let kind = if err.kind() == std::io::ErrorKind::NotFound {
            ErrorKind::NotFound
        } else {
            ErrorKind::Failed
        };
        Self::new(kind, format!("cannot {action} {}: {err}", path.display()))
    }

    /// The exit code for this error.
    pub fn exit_code(&self) -> i32 {
        self.kind.exit_code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The exit-code table as shown in README and `--help`.
pub fn exit_code_table() -> String {
    let mut out = String::from("Exit codes:\n   0  success (run completed)\n");
    for kind in ErrorKind::ALL {
        out.push_str(&format!("{:>4}  {}\n", kind.exit_code(), kind.meaning()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct_and_documented() {
        let mut codes: Vec<i32> = ErrorKind::ALL.iter().map(|k| k.exit_code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 130]);
        let table = exit_code_table();
        for kind in ErrorKind::ALL {
            assert!(table.contains(kind.meaning()));
        }
    }

    #[test]
    fn missing_file_is_not_found() {
        let e = Error::io(
            "read",
            Path::new("/nope"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.message.contains("/nope"));
    }
}
