//! The one error type of the crate.
//!
//! Every failure a user can cause maps to exactly one [`ErrorKind`], and every kind maps to one
//! documented exit code (docs/spec.md §2). Errors carry the file or id involved in their message
//! and, where there is a next step, a hint naming the exact command to run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What went wrong, as far as a caller (and the exit code) is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A run ended `failed` (reason `loopDetected`, `outputContract`, or none), or an unexpected
    /// internal failure (exit 1).
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

    /// The process exit code of docs/spec.md §2.
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
            ErrorKind::Failed => "run failed (loopDetected, outputContract) or an internal error",
            ErrorKind::Usage => "usage error",
            ErrorKind::NotFound => "not found (session, run, operation, message, file)",
            ErrorKind::InvalidInput => "invalid input (YAML, policy, config, bundle, plan)",
            ErrorKind::Conflict => "conflict (lease held, workspace mismatch, already exists)",
            ErrorKind::Policy => "refused by policy (drift, denied capability)",
            ErrorKind::InputRequired => {
                "input required (UNKNOWN tool outcomes, calls awaiting approval)"
            }
            ErrorKind::Budget => "budget exhausted",
            ErrorKind::External => "external failure (model provider, git, a program)",
            ErrorKind::Corrupt => "corrupt state",
            ErrorKind::Canceled => "canceled",
        }
    }
}

/// What an error concerns: the file or the id a user can go and look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Path(PathBuf),
    Id(String),
}

/// The underlying failure of an [`Error`]: another error of ours (see [`Error::wrap`]) or a
/// foreign one (an I/O error, a parser's error). Shared, so that errors stay cheap to clone.
#[derive(Debug, Clone)]
enum Source {
    Ours(Box<Error>),
    Foreign(Arc<dyn std::error::Error + Send + Sync + 'static>),
}

/// The crate's error: a kind, a message that names the file or id involved, optional hints, the
/// file or id it concerns ([`Subject`]) and the underlying error ([`std::error::Error::source`]).
///
/// A message is composed once, by the constructors here ([`Error::wrap`] puts a context in front
/// of an inner error, [`Error::with_consequence`] says what the failure means for the command);
/// callers never edit it afterwards, and never re-derive a kind from its text.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// Next steps, each ideally an exact command (`run kxen-agent run show ses_… run_…`).
    pub hints: Vec<String>,
    subject: Option<Subject>,
    source: Option<Source>,
}

/// Two errors are equal when a user would see the same thing (kind, message, hints, subject);
/// the underlying error is not compared (foreign errors have no equality).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.message == other.message
            && self.hints == other.hints
            && self.subject == other.subject
    }
}

impl Eq for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The message goes through [`crate::redact`]: an error may reach stderr, events and run
    /// records, and no credential may.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: crate::secrets::redact::redact(&message.into()),
            hints: Vec::new(),
            subject: None,
            source: None,
        }
    }

    /// Adds a hint line (`hint: …` on stderr), redacted like the message.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hints
            .push(crate::secrets::redact::redact(&hint.into()));
        self
    }

    /// Names the file this error concerns.
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.subject = Some(Subject::Path(path.into()));
        self
    }

    /// Names the id (session, run, operation, message) this error concerns.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.subject = Some(Subject::Id(id.into()));
        self
    }

    /// Keeps the foreign error this one was made from, for [`std::error::Error::source`].
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Source::Foreign(Arc::new(source)));
        self
    }

    /// `context: <inner message>` of `kind`: the inner error becomes the source, its subject and
    /// hints carry over (they are still the next steps), new hints come after them.
    pub fn wrap(kind: ErrorKind, context: impl Into<String>, inner: Error) -> Self {
        let mut err = Error::new(kind, format!("{}: {}", context.into(), inner.message));
        err.hints = inner.hints.clone();
        err.subject = inner.subject.clone();
        err.source = Some(Source::Ours(Box::new(inner)));
        err
    }

    /// The same failure, said with what it means for the command (`…; no session was created`).
    pub fn with_consequence(self, consequence: &str) -> Self {
        let mut err = Error::new(self.kind, format!("{}; {consequence}", self.message));
        err.hints = self.hints.clone();
        err.subject = self.subject.clone();
        err.source = Some(Source::Ours(Box::new(self)));
        err
    }

    /// The same failure, raised on a copy of files under `staging`, told as the user knows the
    /// files: paths under `staging` are shown relative to it (an import verifies a staged copy,
    /// but the user knows only the bundle's own paths).
    pub fn relative_to(self, staging: &Path) -> Self {
        let prefix = format!("{}/", staging.display());
        let mut err = Error::new(self.kind, self.message.replace(&prefix, ""));
        err.hints = self.hints.clone();
        err.subject = match &self.subject {
            Some(Subject::Path(p)) => Some(Subject::Path(
                p.strip_prefix(staging)
                    .map(Path::to_path_buf)
                    .unwrap_or(p.clone()),
            )),
            other => other.clone(),
        };
        err.source = Some(Source::Ours(Box::new(self)));
        err
    }

    /// The file or id this error concerns, if it names one.
    pub fn subject(&self) -> Option<&Subject> {
        self.subject.as_ref()
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
        Self::io_or(action, path, err, ErrorKind::Failed)
    }

    /// [`Error::io`] where a file that exists but cannot be read is `otherwise` (a task file
    /// that is a directory is the user's mistake, not the system's).
    pub fn io_or(action: &str, path: &Path, err: std::io::Error, otherwise: ErrorKind) -> Self {
        Self::io_told(
            format!("cannot {action} {}: {err}", path.display()),
            path,
            err,
            otherwise,
        )
    }

    /// An I/O failure on `path` told in the caller's own words (`message` names the path).
    pub fn io_told(
        message: String,
        path: &Path,
        err: std::io::Error,
        otherwise: ErrorKind,
    ) -> Self {
        let kind = if err.kind() == std::io::ErrorKind::NotFound {
            ErrorKind::NotFound
        } else {
            otherwise
        };
        Self::new(kind, message).with_path(path).with_source(err)
    }

    /// The exit status for this error.
    pub fn exit_status(&self) -> ExitStatus {
        ExitStatus::Failure(self.kind)
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

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.source {
            Some(Source::Ours(inner)) => Some(inner.as_ref()),
            Some(Source::Foreign(inner)) => Some(inner.as_ref()),
            None => None,
        }
    }
}

/// How a command ended, as the process exit code tells it: success, or the kind of failure
/// (a run that ended `failed`, a budget exhausted, a stale summary…). Commands return this;
/// only the binaries turn it into a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ExitStatus {
    Success,
    Failure(ErrorKind),
}

impl ExitStatus {
    /// The process exit code (0, or the kind's code of docs/spec.md §2).
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure(kind) => kind.exit_code(),
        }
    }
}

impl From<crate::secrets::snapshot::WipeFailed> for Error {
    fn from(e: crate::secrets::snapshot::WipeFailed) -> Error {
        Error::failed(e.to_string()).with_hint("unset the variable, or report this as a bug")
    }
}

impl From<crate::secrets::names::PassEnvRefused> for Error {
    fn from(why: crate::secrets::names::PassEnvRefused) -> Error {
        Error::invalid(why.0)
    }
}

impl From<ErrorKind> for ExitStatus {
    fn from(kind: ErrorKind) -> Self {
        ExitStatus::Failure(kind)
    }
}

/// An exit-code table for a binary's `--help` and README: `0  success` first, then every kind
/// the binary uses, with its code from [`ErrorKind::exit_code`] and the binary's own wording of
/// it (`None`: the binary never exits with it). Both binaries' tables come from here.
pub fn exit_code_table(
    success: &str,
    meaning: impl Fn(ErrorKind) -> Option<&'static str>,
) -> String {
    let mut lines = vec!["Exit codes:".to_string(), format!("{:>4}  {success}", 0)];
    for kind in ErrorKind::ALL {
        if let Some(text) = meaning(kind) {
            lines.push(format!("{:>4}  {text}", kind.exit_code()));
        }
    }
    lines.join("\n")
}

/// The exit-code table of `kxen-agent` (it uses every kind, worded by [`ErrorKind::meaning`]).
pub fn kxen_exit_code_table() -> String {
    exit_code_table("success (run completed)", |kind| Some(kind.meaning()))
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
        let table = kxen_exit_code_table();
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

    #[test]
    fn io_errors_keep_their_path_and_source() {
        use std::error::Error as _;
        let e = Error::io(
            "read",
            Path::new("/x/f"),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        assert_eq!(e.kind, ErrorKind::Failed);
        assert_eq!(e.subject(), Some(&Subject::Path(PathBuf::from("/x/f"))));
        let source = e.source().expect("the io error is the source");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }

    #[test]
    fn wrapping_composes_the_message_once_and_keeps_the_inner_error() {
        use std::error::Error as _;
        let inner = Error::invalid("bad id")
            .with_hint("use ses_…")
            .with_id("ses_1");
        let outer = Error::wrap(ErrorKind::Conflict, "cannot import", inner.clone())
            .with_hint("import into a clone");
        assert_eq!(outer.message, "cannot import: bad id");
        assert_eq!(outer.kind, ErrorKind::Conflict);
        assert_eq!(outer.hints, vec!["use ses_…", "import into a clone"]);
        assert_eq!(outer.subject(), Some(&Subject::Id("ses_1".into())));
        let source = outer.source().unwrap().downcast_ref::<Error>().unwrap();
        assert_eq!(source, &inner);
        let said = inner.with_consequence("no session was created");
        assert_eq!(said.message, "bad id; no session was created");
        assert_eq!(said.kind, ErrorKind::InvalidInput);
    }

    #[test]
    fn a_staged_copy_is_told_by_the_paths_the_user_knows() {
        let staging = Path::new("/state/.import-1");
        let e = Error::corrupt("/state/.import-1/runs/r/journal.jsonl:4: the chain is broken")
            .with_path("/state/.import-1/runs/r/journal.jsonl")
            .relative_to(staging);
        assert_eq!(e.message, "runs/r/journal.jsonl:4: the chain is broken");
        assert_eq!(
            e.subject(),
            Some(&Subject::Path(PathBuf::from("runs/r/journal.jsonl")))
        );
    }
}
