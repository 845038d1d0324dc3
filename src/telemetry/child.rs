//! A `task` child's run in its parent's trace: the child executes in this process with an event
//! sink of its own, which is wrapped in a [`TracingSink`] rooted at the parent's
//! `execute_tool task` span when the parent's run is traced — so the child's `invoke_agent`,
//! `chat` and `execute_tool` spans (and its MCP and LSP requests, and its own children) are
//! measured live, as the parent's are.

use serde_json::Value as Json;

use super::current;
use super::sink::TracingSink;
use crate::events::EventSink;
use crate::state::StateDir;

/// Where a child run comes from: the parent's run and `task` operation, and the child's depth.
pub struct ChildOf<'a> {
    pub parent_run_id: &'a str,
    pub op_id: &'a str,
    pub depth: u32,
}

/// Runs `execute` with `inner` as its sink — wrapped in a tracing sink under the parent's
/// `task` span when that call is traced (see [`current`]), as is otherwise.
pub fn traced<T>(
    state: &StateDir,
    of: &ChildOf,
    provider_info: Option<&Json>,
    inner: &mut dyn EventSink,
    execute: impl FnOnce(&mut dyn EventSink) -> T,
) -> T {
    // Under the `task` call's span; a child that the parent's recovery resumes has no call span
    // in this attempt: under the attempt's `invoke_agent` then.
    let under = current::op_parent(of.parent_run_id, of.op_id)
        .or_else(|| current::op_parent(of.parent_run_id, current::RUN));
    let (Some(under), Some((queue, content))) = (under, current::queue()) else {
        return execute(inner);
    };
    let mut sink = TracingSink::for_child(
        inner,
        queue,
        provider_info,
        state,
        content,
        under,
        u64::from(of.depth),
    );
    let result = execute(&mut sink);
    sink.finish();
    result
}
