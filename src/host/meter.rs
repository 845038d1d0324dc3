//! The host meter and the limit check of a plan run (dwp.md §6, dwp-details.md §5).
//!
//! After each model call whose usage the provider reported (durable in the Session's messages
//! first), [`PlanHost::after_call`] writes a small meter artifact under the plan's
//! `analysis_results/` (atomic replace), then appends — through the plan's one append path,
//! under its writer lock, in one fsync'd group — an observed `resource_sample` of the Session's
//! cumulative provider tokens on the plan task and, with real prices, its cumulative USD,
//! citing the artifact. Samples carry cumulative values computed from the Session's own records,
//! so a crash anywhere loses nothing and duplicates nothing: a sample that did not make it is
//! written (with the usage since) before the next model call; one that did is not repeated,
//! because a value equal to this host's latest sample of that limit is never appended again.
//!
//! [`PlanHost::before_call`] runs before every model call with the same code as
//! `dwp resources report` and `hold` and this host's abilities: an existing hold, or an
//! enforced limit whose spent + pending passes its dispatch ceiling, stops the run (once
//! recording `LIMIT: exhausted <id>: <detail>`). `dwp resources recover` lifts the hold; a
//! recovery recorded while the limit is still over its ceiling accepts that overrun (the run
//! continues), and the limit stops the run again only once it is raised (a contract revision)
//! and passed anew. A limit whose meter this host lacks stays advisory — [`PlanHost::advisories`]
//! says so — and is never enforced by guessing.
//!
//! The journal is read once when the run starts ([`Tracked`]); a check or an append re-reads it
//! only when another writer changed the live file, so the per-call cost does not grow with a
//! quiet plan's history beyond recomputing the report over the events in memory.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::abilities::Metering;
use super::binding::PlanBinding;
use crate::dwp::plan::writer::{self, Decision, NewEvent, Tracked};
use crate::dwp::plan::{Contract, EventType, Plan};
use crate::dwp::resources::counters::Family;
use crate::dwp::resources::{Abilities, limits, report};
use crate::error::Result;
use crate::fsx::failpoint;
use crate::session::UsageRecord;

/// The actor identity of this host's samples.
pub fn identity() -> String {
    format!("kxen-agent/{}", env!("CARGO_PKG_VERSION"))
}

/// Where meter artifacts go, relative to the plan folder (what `evidence_path` cites).
pub const ARTIFACT_DIR: &str = "analysis_results/kxen-agent-meter";

/// Why a run may not make its next model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    pub limit: String,
    pub detail: String,
    /// The seq of the `LIMIT: exhausted` record that holds the run.
    pub seq: u64,
    /// The plan folder (for the hint naming `dwp resources recover`).
    pub plan_dir: std::path::PathBuf,
}

/// One plan run's meter and limit check.
pub struct PlanHost {
    plan: Plan,
    contract: Contract,
    pub binding: PlanBinding,
    abilities: Abilities,
    metering: Metering,
    identity: String,
    tracked: Tracked,
    /// Tokens the Session's earlier runs on this plan task reported.
    base: UsageRecord,
    /// This host's latest sampled value per `limit_id` (`""`: a sample without one) and unit.
    sampled: BTreeMap<(String, &'static str), f64>,
    /// A reply without usage was already reported.
    warned_missing_usage: bool,
}

impl PlanHost {
    /// Opens the bound plan and reads its journal once.
    pub fn open(
        binding: PlanBinding,
        abilities: &BTreeMap<String, bool>,
        metering: Metering,
        base: UsageRecord,
    ) -> Result<PlanHost> {
        // Opened by its canonical path, once: the folder may sit in the workspace, where the
        // agent's commands could later swap a symlink on the way to it.
        let dir = binding
            .dir
            .canonicalize()
            .unwrap_or_else(|_| binding.dir.clone());
        let plan = Plan::open(&dir)?;
        let contract = plan.contract()?;
        let tracked = Tracked::read(&plan, &contract)?;
        let identity = identity();
        let mut sampled = BTreeMap::new();
        for e in &tracked.journal.events {
            if e.kind == EventType::ResourceSample
                && e.actor_identity() == identity
                && e.trust() == Some("observed")
                && let Some(unit) = [UNIT_TOKENS, UNIT_USD]
                    .into_iter()
                    .find(|u| e.str("unit") == Some(*u))
                && let Some(v) = e.value("value").and_then(|v| v.as_f64())
            {
                let limit = e.str("limit_id").unwrap_or_default().to_string();
                sampled.insert((limit, unit), v);
            }
        }
        Ok(PlanHost {
            plan,
            contract,
            binding,
            abilities: super::abilities::as_frame(abilities),
            metering,
            identity,
            tracked,
            base,
            sampled,
            warned_missing_usage: false,
        })
    }

    /// One warning per enforced limit this host cannot meter: it stays advisory.
    pub fn advisories(&self) -> Vec<String> {
        self.contract
            .limits
            .iter()
            .filter(|l| l.enforced)
            .filter_map(|l| {
                let meter = Family::of(&l.unit)?.meter()?;
                (!self.abilities.has(meter)).then(|| {
                    format!(
                        "plan limit {} ({} {}) stays advisory for this run: kxen-agent has no \
                         {meter} here (provider `{}`{}), so it is neither metered nor enforced \
                         — never by guessing",
                        l.id,
                        l.limit,
                        l.unit,
                        self.metering.provider,
                        if meter == "meter_spend" {
                            " needs reported usage and [providers.NAME.price] in USD"
                        } else {
                            " does not report usage"
                        }
                    )
                })
            })
            .collect()
    }

    /// The check before a model call. First writes the sample a crash may have kept from being
    /// written (`session_usage`: the Session's usage on this plan task so far, this run's part
    /// included), then refuses the call on a hold or an over-ceiling enforced limit, recording
    /// the exhaustion once.
    pub fn before_call(
        &mut self,
        run_id: &str,
        calls: u64,
        run_usage: UsageRecord,
    ) -> Result<Option<Exhausted>> {
        self.meter(run_id, calls, None, run_usage)?;
        self.tracked.refresh(&self.plan, &self.contract)?;
        let events = &self.tracked.journal.events;
        if let Some(hold) = limits::hold(&self.contract, events) {
            return Ok(Some(Exhausted {
                limit: hold.limit,
                detail: hold.detail.unwrap_or_default(),
                seq: hold.seq,
                plan_dir: self.binding.dir.clone(),
            }));
        }
        let report = report::build(&self.contract, events, &self.abilities);
        let latest = limits::latest(events);
        let over = report.rows.iter().filter(|r| r.over_ceiling).find(|row| {
            // A recovery recorded while the limit was already over its ceiling accepts that
            // overrun: the limit stops this host again only once it is raised and passed anew.
            let accepted = latest
                .get(&row.limit_id)
                .filter(|r| !r.exhausted)
                .is_some_and(|r| {
                    let upto = events.partition_point(|e| e.seq < r.seq);
                    report::build(&self.contract, &events[..upto], &self.abilities)
                        .rows
                        .iter()
                        .any(|then| then.limit_id == row.limit_id && then.over_ceiling)
                });
            !accepted
        });
        let Some(row) = over else {
            return Ok(None);
        };
        let limit = row.limit_id.clone();
        let detail = format!(
            "{} (kxen-agent run {run_id} stopped before model call {})",
            row.refusal_detail(),
            calls + 1
        );
        let contract = &self.contract;
        let written = writer::append_tracked(
            &self.plan,
            contract,
            &mut self.tracked,
            |_| {},
            |journal| {
                Ok(
                    match limits::decide(journal, contract, true, &limit, Some(&detail))? {
                        Decision::Append(e) => vec![e],
                        Decision::Existing(_) => Vec::new(),
                    },
                )
            },
        )?;
        let seq = written
            .first()
            .map(|e| e.seq)
            .or_else(|| limits::hold(contract, &self.tracked.journal.events).map(|h| h.seq))
            .unwrap_or_default();
        Ok(Some(Exhausted {
            limit,
            detail,
            seq,
            plan_dir: self.binding.dir.clone(),
        }))
    }

    /// For a run that reached its terminal result (not yet settled): writes the sample of its
    /// last model call (`call_usage`, when it made one), or the one a crash kept from being
    /// written. No limit check: no call follows.
    pub fn before_final(
        &mut self,
        run_id: &str,
        calls: u64,
        call_usage: Option<UsageRecord>,
        run_usage: UsageRecord,
    ) -> Result<()> {
        self.meter(run_id, calls, call_usage, run_usage)
    }

    /// After a model call whose response (and usage) is durable in the Session: meter it.
    /// Returns a warning when a provider that should report usage did not.
    pub fn after_call(
        &mut self,
        run_id: &str,
        calls: u64,
        call_usage: Option<UsageRecord>,
        run_usage: UsageRecord,
    ) -> Result<Option<String>> {
        if call_usage.is_none() && self.metering.reports_usage && !self.warned_missing_usage {
            self.warned_missing_usage = true;
            return Ok(Some(format!(
                "model call {calls} of run {run_id} reported no token usage: nothing is metered \
                 for it (usage is never estimated)"
            )));
        }
        self.meter(run_id, calls, call_usage, run_usage)?;
        Ok(None)
    }

    /// Writes the artifact and the samples for the Session's usage so far, unless this host's
    /// latest samples already hold it.
    fn meter(
        &mut self,
        run_id: &str,
        calls: u64,
        call_usage: Option<UsageRecord>,
        run_usage: UsageRecord,
    ) -> Result<()> {
        if !self.metering.reports_usage {
            return Ok(());
        }
        let mut total = self.base;
        total.add(run_usage);
        let tokens = total.input_tokens.saturating_add(total.output_tokens);
        let price = self.metering.price.clone();
        let usd = price.as_ref().map(|p| {
            (total.input_tokens as f64 * p.input_per_million
                + total.output_tokens as f64 * p.output_per_million)
                / 1_000_000.0
        });
        let mut due: Vec<(String, &'static str, Value)> = Vec::new();
        for limit in self.limits_of(Family::Tokens) {
            due.push((limit, UNIT_TOKENS, Value::from(tokens)));
        }
        if let Some(usd) = usd {
            for limit in self.limits_of(Family::Spend) {
                due.push((limit, UNIT_USD, json!(usd)));
            }
        }
        due.retain(|(limit, unit, value)| {
            self.sampled.get(&(limit.clone(), *unit)).copied() != value.as_f64()
        });
        if due.is_empty() || tokens == 0 {
            return Ok(());
        }
        let evidence = format!("{ARTIFACT_DIR}/{run_id}/call-{calls:05}.json");
        let artifact = json!({
            "schema": "kxen-agent/meter-record/v1",
            "host": self.identity,
            "plan": self.binding.plan,
            "task": self.binding.task,
            "run_id": run_id,
            "call": calls,
            "call_usage": call_usage.map(|u| json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens})),
            "cumulative": {
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "tokens": tokens,
                "usd": usd,
            },
            "provider": self.metering.provider,
            "rates": price.as_ref().map(|p| json!({
                "input_per_million": p.input_per_million,
                "output_per_million": p.output_per_million,
                "currency": p.currency,
            })),
        });
        let path = self.plan.dir.join(&evidence);
        if let Some(parent) = path.parent() {
            crate::fsx::create_dir_private(parent)?;
        }
        let mut bytes = crate::canonical::to_pretty(&artifact);
        bytes.push('\n');
        crate::fsx::write_atomic(&path, bytes.as_bytes(), 0o644)?;
        failpoint::hit("plan.meter.after-artifact");
        let ts = crate::clock::format_seconds(crate::clock::now_millis().div_euclid(1000));
        let source = format!(
            "kxen-agent provider usage ({}){}",
            self.metering.provider,
            if price.is_some() {
                " x [providers.price] rates"
            } else {
                ""
            }
        );
        let news: Vec<NewEvent> = due
            .iter()
            .map(|(limit, unit, value)| {
                let mut payload = Map::new();
                payload.insert("source".into(), Value::from(source.as_str()));
                if !limit.is_empty() {
                    payload.insert("limit_id".into(), Value::from(limit.as_str()));
                }
                payload.insert("value".into(), value.clone());
                payload.insert("unit".into(), Value::from(*unit));
                payload.insert("trust".into(), Value::from("observed"));
                payload.insert("evidence_path".into(), Value::from(evidence.as_str()));
                NewEvent {
                    kind: "resource_sample".into(),
                    actor_kind: "host_adapter".into(),
                    actor_identity: self.identity.clone(),
                    ts: ts.clone(),
                    payload,
                }
            })
            .collect();
        writer::append_tracked(
            &self.plan,
            &self.contract,
            &mut self.tracked,
            |_| {},
            |_| Ok(news),
        )?;
        failpoint::hit("plan.meter.after-sample");
        for (limit, unit, value) in due {
            if let Some(v) = value.as_f64() {
                self.sampled.insert((limit, unit), v);
            }
        }
        Ok(())
    }

    /// The ids of the contract's limits of `family`; `""` (a sample without `limit_id`) when
    /// there is none, so accounting still sees the meter.
    fn limits_of(&self, family: Family) -> Vec<String> {
        let ids: Vec<String> = self
            .contract
            .limits
            .iter()
            .filter(|l| Family::of(&l.unit) == Some(family))
            .map(|l| l.id.clone())
            .collect();
        if ids.is_empty() {
            vec![String::new()]
        } else {
            ids
        }
    }

    /// The plan folder as this host opened it (canonical: a symlink swapped in the workspace
    /// later does not redirect the host's appends).
    pub fn plan_dir(&self) -> &std::path::Path {
        &self.plan.dir
    }

    /// The plan's contract (for the delegation grant).
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// Whether the contract grants `permission`.
    pub fn granted(&self, permission: &str) -> bool {
        self.contract
            .raw
            .get("permissions")
            .and_then(|p| p.get("granted"))
            .and_then(Value::as_array)
            .is_some_and(|g| g.iter().any(|p| p == permission))
    }
}

const UNIT_TOKENS: &str = "tokens";
const UNIT_USD: &str = "USD";
