//! The `delegation` records of a plan run's `task` children (docs/dwp-spec.md, "Journal event types", journal-event
//! v7): `launched` when a child is about to run, then exactly one of `completed`, `failed` or
//! `cancelled` when its run ends. Transport `headless` (the child runs in this process, without
//! a terminal), `via: "kxen-agent"`, the child's run id as `delegation_id`, the sha256 of the
//! prompt the child got as `prompt_digest`, and `target` naming the child Session and run.
//!
//! Exactly once, whatever crashes: both records are decided on the journal as it stands under
//! the plan's writer lock — `launched` is appended only if no record of that delegation exists,
//! a terminal state only if none exists yet (and `launched` first, should it be missing). The
//! runtime asks for `launched` before every execution of the child (a fresh start or a
//! recovery) and for the terminal state after the child's run ended and before the parent
//! records the `task` call's outcome, so a crash between the two is finished by the parent's
//! recovery, which reads the child's recorded end back (the child never runs twice) and asks
//! again: one terminal record, never two, never none once the child has finished.
//!
//! Only in v7 plans whose contract grants `agent_delegation`: without the grant `task` is
//! refused for a plan run (abilities are not authority), and a v6 journal cannot hold the
//! records, so `task` is refused there too.

use serde_json::{Map, Value};

use super::meter::PlanHost;
use crate::dwp::plan::contract::Generation;
use crate::dwp::plan::writer::NewEvent;
use crate::dwp::plan::{Event, EventType, Journal};
use crate::error::Result;

/// The `via` of every delegation this host records.
pub const VIA: &str = "kxen-agent";

/// How a delegated child's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Completed,
    Failed,
    Cancelled,
}

impl End {
    pub fn state(self) -> &'static str {
        match self {
            End::Completed => "completed",
            End::Failed => "failed",
            End::Cancelled => "cancelled",
        }
    }
}

/// One child as a delegation of the plan task.
#[derive(Debug, Clone)]
pub struct Child<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    /// The task text the child Session was created with (its prompt, redacted).
    pub prompt: &'a str,
}

impl PlanHost {
    /// Why a plan run may not start a `task` child (`None`: it may). The model reads it.
    pub fn delegation_refusal(&self) -> Option<String> {
        if !self.granted("agent_delegation") {
            return Some(format!(
                "refused: this run works on plan {}, whose contract does not grant \
                 agent_delegation, so it may not start subagents (a host's abilities are not \
                 authority); do the work in this run",
                self.binding.plan
            ));
        }
        if self.contract.generation != Generation::V7 {
            return Some(format!(
                "refused: this run works on plan {}, a DWP {} plan, whose journal cannot record \
                 delegations (they exist from v7 on); do the work in this run",
                self.binding.plan,
                self.contract.generation.name()
            ));
        }
        None
    }

    /// Records that `child` is launched, unless the journal already has a record of it.
    pub fn delegation_launched(&mut self, child: &Child) -> Result<()> {
        let id = child.run_id.to_string();
        let launched = self.delegation_event(child, "launched");
        self.append(move |journal| {
            Ok(if states(journal, &id).is_empty() {
                vec![launched]
            } else {
                Vec::new()
            })
        })?;
        crate::fsx::failpoint::hit("plan.delegation.after-launched");
        Ok(())
    }

    /// Records how `child`'s run ended, unless a terminal record of it exists (a missing
    /// `launched` goes first).
    pub fn delegation_ended(&mut self, child: &Child, end: End) -> Result<()> {
        let id = child.run_id.to_string();
        let launched = self.delegation_event(child, "launched");
        let mut ended = self.delegation_event(child, end.state());
        ended.payload.remove("prompt_digest");
        self.append(move |journal| {
            let seen = states(journal, &id);
            if seen.iter().any(|s| s != "launched") {
                return Ok(Vec::new());
            }
            Ok(if seen.is_empty() {
                vec![launched, ended]
            } else {
                vec![ended]
            })
        })?;
        crate::fsx::failpoint::hit("plan.delegation.after-ended");
        Ok(())
    }

    fn delegation_event(&self, child: &Child, state: &str) -> NewEvent {
        let mut payload = Map::new();
        payload.insert("task".into(), Value::from(self.binding.task.as_str()));
        payload.insert("delegation_id".into(), Value::from(child.run_id));
        payload.insert("transport".into(), Value::from("headless"));
        payload.insert("via".into(), Value::from(VIA));
        payload.insert("state".into(), Value::from(state));
        payload.insert("kind".into(), Value::from("task"));
        payload.insert(
            "target".into(),
            Value::from(format!(
                "kxen-agent Session {} run {}",
                child.session_id, child.run_id
            )),
        );
        payload.insert(
            "prompt_digest".into(),
            Value::from(crate::hash::sha256_prefixed(child.prompt.as_bytes())),
        );
        NewEvent {
            kind: "delegation".into(),
            actor_kind: "host_adapter".into(),
            actor_identity: self.identity.clone(),
            ts: crate::clock::format_seconds(crate::clock::now_millis().div_euclid(1000)),
            payload,
        }
    }
}

/// The states recorded for delegation `id`, in journal order.
fn states(journal: &Journal, id: &str) -> Vec<String> {
    journal
        .events
        .iter()
        .filter(|e: &&Event| e.kind == EventType::Delegation && e.str("delegation_id") == Some(id))
        .filter_map(|e| e.str("state").map(str::to_string))
        .collect()
}
