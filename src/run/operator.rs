//! What `run resolve`, `run approve` and `run deny` share: an operator acts on one operation of
//! a stopped run, under the Session's run lease (so never while the run executes), and only on a
//! run whose record, journal and messages agree as `session verify` checks them (corrupt state:
//! exit 10, naming the file).

use crate::error::{Error, Result};
use crate::ids::{self, IdKind};
use crate::journal::{Journal, OpState};
use crate::session::run_record::RunState;
use crate::session::{Lease, store};
use crate::state::StateDir;

/// One operation opened for an operator's record, with the lease held until this is dropped.
pub struct OpenedOperation {
    _lease: Lease,
    /// The run's journal, where the operator's record goes.
    pub journal: Journal,
    /// The operation as the journal has it now.
    pub op: OpState,
    /// `kxen-agent run show SES RUN`, for hints.
    pub inspect: String,
}

/// Validates the ids, takes the lease, checks the run's files and finds `op_id`: an unknown id
/// is exit 3 with a hint to `listing` (what `run show` lists that the operator looks for).
pub fn open(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    op_id: &str,
    listing: &str,
) -> Result<OpenedOperation> {
    ids::validate_kind(session_id, IdKind::Session)?;
    ids::validate_kind(run_id, IdKind::Run)?;
    ids::validate_kind(op_id, IdKind::Operation)?;
    let paths = store::session_paths(state, session_id)?;
    let lease = Lease::acquire(&paths.dir, session_id)?;
    let run_paths = paths.run(run_id);
    RunState::read(&run_paths, run_id)?;
    crate::session::verify::check_consistency(&paths, session_id, Some(run_id))?;
    let journal = Journal::open(&run_paths.journal())?;
    let inspect = format!("kxen-agent run show {session_id} {run_id}");
    let Some(op) = journal.table().get(op_id).cloned() else {
        return Err(Error::not_found(format!(
            "no operation {op_id} in run {run_id} of session {session_id}"
        ))
        .with_hint(format!("list {listing} with `{inspect}`")));
    };
    Ok(OpenedOperation {
        _lease: lease,
        journal,
        op,
        inspect,
    })
}
