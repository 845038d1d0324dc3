//! Task trees: a bundle holds a Session and all its `task` children, recursively (issue 15).
//!
//! A `task` child is a Session of its own (`sessions/<child>/`), named by the `started` record of
//! its parent's `task` operation (`child`) and naming its parent back (`parentId`, `taskParent`).
//! Export walks those links down from the exported Session ([`named_children`]); import accepts a
//! bundle only when the links of every Session in it agree ([`check`]), so a bundle cannot plant
//! a Session that claims a parent it does not belong to, nor graft one into a local tree.
//!
//! In the bundle a child's files are those of a Session with the prefix `sessions/<child>/`
//! ([`child_prefix`]); the exported Session's own files keep their plain names. Ids and links are
//! kept as they are: an imported tree is the same tree.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, ErrorKind, Result};
use crate::journal::ChildRef;
use crate::session::{ForkKind, SessionMeta};

/// The prefix of a child's files in a bundle.
pub fn child_prefix(session_id: &str) -> String {
    format!("sessions/{session_id}/")
}

/// A `task` operation of a Session's run and the child it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub run_id: String,
    pub op_id: String,
    pub child: ChildRef,
}

/// The `task` children named by the `started` records of a verified Session's runs, in run
/// then journal order (a named child may never have been created: see `docs/state-format.md`,
/// "Task children"), from what its verification already read.
pub fn named_from(report: &crate::session::verify::Verified) -> Vec<Named> {
    report
        .children
        .iter()
        .map(|(run_id, op_id, child)| Named {
            run_id: run_id.clone(),
            op_id: op_id.clone(),
            child: child.clone(),
        })
        .collect()
}

/// One Session of a bundle, as the tree check sees it.
#[derive(Debug)]
pub struct Member<'a> {
    pub meta: &'a SessionMeta,
    /// The children its journals name.
    pub named: &'a [Named],
}

/// Checks the links of a bundle's Sessions (`order`: the exported Session `root` first, then its
/// children as the bundle lists them): `root` is the exported Session (its own parent, if
/// any, is not in the bundle: a subtree may be exported), every other member is a `task` child
/// whose parent is in the bundle, whose parent's journal names it (that run, that operation,
/// its first run), which is one level below its parent, whose parent's lock grants `task`, and
/// every child a member's journal names that is in the bundle names that member as its parent.
/// Together these rule out cycles, a child claiming another parent and a Session outside the
/// tree. `Err(why)`: the first broken link, a corrupt-state error (exit 10) that says only what
/// is wrong; [`broken`] names the bundle in front of it.
pub fn check(root: &str, order: &[(&str, Member<'_>)]) -> Result<()> {
    let members: HashMap<&str, &Member> = order.iter().map(|(id, m)| (*id, m)).collect();
    // Upwards first (in bundle order, so the first broken link reported is always the same).
    for &(id, ref member) in &order[1..] {
        let meta = member.meta;
        let (Some(ForkKind::Task), Some(parent), Some(origin)) = (
            meta.fork_kind,
            meta.parent_id.as_deref(),
            meta.task_parent.as_ref(),
        ) else {
            return Err(Error::corrupt(format!(
                "session {id} is not a task child (no forkKind \"task\" with parentId and \
                 taskParent): a bundle holds one Session and its task children only"
            )));
        };
        let Some(up) = members.get(parent) else {
            return Err(Error::corrupt(format!(
                "session {id} names parent {parent}, which is not in the bundle (a child outside \
                 the tree)"
            )));
        };
        let named_here = up.named.iter().any(|n| {
            n.run_id == origin.run_id
                && n.op_id == origin.op_id
                && n.child.session_id == id
                && Some(&n.child.run_id) == meta.first_run_id.as_ref()
        });
        if !named_here {
            return Err(Error::corrupt(format!(
                "session {id} claims to be the child of task operation {} of run {} of session \
                 {parent}, but that journal names no such child",
                origin.op_id, origin.run_id
            )));
        }
        let expected = up.meta.task_depth() + 1;
        if origin.depth != expected {
            return Err(Error::corrupt(format!(
                "session {id} records task depth {} but its parent {parent} is at depth {}",
                origin.depth,
                expected - 1
            )));
        }
        let limit = up.meta.lock.policy.task_depth_limit();
        if origin.depth > limit {
            return Err(Error::corrupt(format!(
                "session {id} is at task depth {} beyond its policy's maxTaskDepth {limit}",
                origin.depth
            )));
        }
        if !up.meta.lock.capabilities.iter().any(|c| c == "task") {
            return Err(Error::corrupt(format!(
                "session {id} is a task child of {parent}, whose lock does not grant `task` \
                 (beyond the depth limit)"
            )));
        }
    }
    // Downwards: a child a journal names that is in the bundle belongs to that journal's Session.
    for &(id, ref member) in order {
        for named in member.named {
            let child = named.child.session_id.as_str();
            if child == root {
                return Err(Error::corrupt(format!(
                    "session {id}'s journal names the bundle's own session {root} as its task \
                     child (operation {})",
                    named.op_id
                )));
            }
            if let Some(c) = members.get(child)
                && c.meta.parent_id.as_deref() != Some(id)
            {
                return Err(Error::corrupt(format!(
                    "session {id}'s task operation {} names session {child} as its child, but \
                     {child} names {} as its parent",
                    named.op_id,
                    c.meta.parent_id.as_deref().unwrap_or("no session")
                )));
            }
        }
    }
    // Every member reaches the root through its parents (depths only grow downwards, so this
    // holds already; walked anyway, bounded, so no link structure can loop).
    for &(start, _) in order {
        let mut at = start;
        let mut seen = HashSet::new();
        while at != root {
            if !seen.insert(at) {
                return Err(Error::corrupt(format!(
                    "session {start}'s parents form a cycle"
                )));
            }
            at = match members.get(at).and_then(|m| m.meta.parent_id.as_deref()) {
                Some(p) if members.contains_key(p) => p,
                _ => {
                    return Err(Error::corrupt(format!(
                        "session {start} does not descend from {root}"
                    )));
                }
            };
        }
    }
    Ok(())
}

/// The error of a broken tree in the bundle `bundle` (exit 10: the bundle's cross-references).
pub fn broken(bundle: &std::path::Path, why: Error) -> Error {
    let context = format!(
        "{}: the bundle's task tree is inconsistent",
        bundle.display()
    );
    Error::wrap(ErrorKind::Corrupt, context, why)
        .with_path(bundle)
        .with_hint("the bundle is damaged or was edited; export it again from the original")
}
