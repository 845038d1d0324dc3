//! Named crash points at durable steps, for crash tests.
//!
//! Compiled in only with the `failpoints` feature. When the environment variable
//! `KXEN_FAILPOINT` names a point, the process aborts (no destructors, no flushing — as close to
//! a power cut as a test can get) the first time execution reaches it — or, with
//! `KXEN_FAILPOINT_SKIP=N`, the (N+1)-th time, so a crash test reaches a point that one process
//! passes many times (a parent's and each `task` child's steps) at every one of its passes.
//! With `KXEN_FAILPOINT_POWERCUT` set as well, lazily appended lines that were never synced are
//! cut off first (`fsx::append_lines_lazy`): the worst a power cut leaves.
//! Every point is listed in [`ALL`] so a crash test can iterate all of them and none is
//! forgotten.

/// Every failpoint name in the crate. Add new points here; the crash test iterates this list.
pub const ALL: &[&str] = &[
    // A Session's creation (session::store::create): its lock (in session.json) is written in
    // the staging directory, then the task and the first run, then the directory is renamed.
    "session.create.after-lock",
    "session.create.before-rename",
    "session.create.after-rename",
    // The durable tool boundary (docs/spec.md §8), in the order the loop reaches them.
    "tool.after-assistant-message",
    "tool.after-started",
    "tool.after-side-effect",
    "tool.after-outcome-known",
    "tool.after-turn-append",
    "tool.after-settled",
    // A Streamable HTTP MCP call (mcp::servers): its stream position (`mcpStream`) is written
    // (lazily: it survives a process crash), the server still working on the call.
    "mcp.after-stream-position",
    // Verification before completion (run::verification): the answer and its reminder are
    // durable, the next model call not yet made.
    "verify.after-reminder",
    // Compaction (run::compaction): the summary came back, nothing written; the `compaction`
    // record is durable, the next model call not yet made.
    "compaction.after-summary",
    "compaction.after-record",
    // Approvals (run::approval): a call whose rule is `ask` is journaled awaiting approval
    // (nothing ran); an operator's decision is journaled by `run approve` / `run deny`.
    "approval.after-awaiting",
    "approval.after-decision",
    // A call every matching `pre_tool_use` hook allowed (run::approval::hook_allowed): the
    // hooks' answer is durable (held and approved in one append), the call not yet started.
    "hook.after-allowed",
    // A `task` call (run::children): the child Session exists (created after the parent's
    // `started` record), not yet run; the child's run ended, the parent's outcome not recorded.
    "task.after-child-created",
    "task.after-child-ended",
    // Two-phase final settlement.
    "settle.after-result",
    "settle.after-final-message",
    "settle.after-settled",
    // `session import` (bundle::import): staged and verified, blobs moved, each task child
    // moved into place (once per child), the exported Session renamed.
    "import.after-staging",
    "import.before-rename",
    "import.after-task-renamed",
    // `session pull` of a Session that exists locally (bundle::import, FastForward): the verified
    // copy is staged and its blobs moved; the swap record (bundle::swap, the commit point) is
    // durable, nothing moved; the Session's copies are about to be / were swapped (its children
    // first, each an `import.after-task-renamed`).
    "pull.after-swap-record",
    "pull.before-exchange",
    "pull.after-exchange",
    // `--resume SES --remote NAME` (sync::remote_run): the remote lease is claimed; the newest
    // snapshot is pulled; the result is pushed, the lease not yet released.
    "remote.after-claim",
    "remote.after-pull",
    "remote.after-push",
    // `session export` (fsx::write_atomic_stream_owned): its temp beside --output is created
    // and locked, nothing written yet; a killed export's temp is removed by the next export.
    "export.after-temp-created",
    // A plan journal append (dwp::plan::writer): validated and about to be written under the
    // writer lock; written and fsynced, not yet reported. `after-newline`: the missing newline
    // of a complete last event was added, nothing else written.
    "dwp.append.after-newline",
    "dwp.append.before-write",
    "dwp.append.after-write",
    // A plan run's host meter (host::meter): the meter record is appended to the run's
    // artifact, its samples not yet; the samples are appended, the limit check not yet made;
    // the journal is about to be checked (after a meter that wrote nothing, too).
    "plan.meter.after-artifact",
    "plan.meter.after-sample",
    "plan.meter.before-check",
    // A plan run's `task` child (host::delegation): `launched` recorded, the child not yet run;
    // its terminal state recorded, the parent's outcome not yet.
    "plan.delegation.after-launched",
    "plan.delegation.after-ended",
];

/// Aborts the process if the `KXEN_FAILPOINT` environment variable equals `name`.
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    {
        debug_assert!(
            ALL.contains(&name),
            "failpoint {name} is not listed in fsx::failpoint::ALL"
        );
        use std::sync::atomic::{AtomicUsize, Ordering};
        static PASSED: AtomicUsize = AtomicUsize::new(0);
        if std::env::var("KXEN_FAILPOINT").is_ok_and(|v| v == name) {
            let skip = std::env::var("KXEN_FAILPOINT_SKIP")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if PASSED.fetch_add(1, Ordering::SeqCst) >= skip {
                if std::env::var_os("KXEN_FAILPOINT_POWERCUT").is_some() {
                    // A power cut, not only a process crash: appends never synced are lost.
                    super::append::power_cut::simulate();
                }
                std::process::abort();
            }
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
