//! The host meter and the limit check of a plan run (docs/dwp-spec.md, "Host abilities", "The resource frame").
//!
//! **What a sample says.** Before each model call ([`PlanHost::before_call`]) and when a run's
//! end is recorded ([`PlanHost::before_final`]) the host writes, when the value changed, an
//! observed `resource_sample` of the cumulative provider tokens of the Session tree on the plan
//! task (see [`super`]) and, with real prices, one of its cumulative USD: values computed from
//! the Session's own records, never estimated. Cumulative values make a crash harmless: a
//! sample that did not make it is restated by the next one, one that did is not repeated
//! (a value not above this host's latest sample of that limit is never appended).
//!
//! **Recovery rule (power cuts).** A sample only states usage that is already durable in the
//! Session: the previous turn's assistant message is durable once its first `started` record
//! (which carries it) or a synced append is, and both happen before the next model call; a
//! run's last reply is durable in its result before the final sample. So after a power cut the
//! records say at least what any surviving sample said, and the next sample restates the
//! truth: nothing is counted twice, nothing is lost. Should the records still be behind (a child
//! whose last reply lives only in its journal until its recovery re-derives it), the host writes
//! nothing rather than a lower value: samples never go down.
//!
//! **Evidence first, two fsyncs.** Each sample group cites the run's meter artifact,
//! `analysis_results/kxen-agent-meter/<run>.ndjson` (what `evidence_path` names), to which a
//! line with the run's usage, the cumulative values and the rates is durably appended before
//! the samples (its line number is in the samples' `source`). Then the samples go, through the
//! plan's one append path under its writer lock, in one fsync'd group. Two fsync'd appends per
//! metered call; the artifact file's directory entry is synced once, when it is created.
//!
//! **Limits.** [`PlanHost::before_call`] then refuses the call on a hold or on an enforced
//! limit whose spent + pending passes its dispatch ceiling — the same report and hold code as
//! `dwp resources report`/`hold` ([`Fold`]), with this host's abilities — recording
//! `LIMIT: exhausted <id>: <detail>` once. A recovery recorded while the limit was already over
//! its ceiling accepts that overrun (the run continues); the limit stops the run again only
//! once it is raised (a contract revision) and passed anew. A limit whose meter this host lacks
//! stays advisory ([`PlanHost::advisories`]) and is never enforced by guessing.
//!
//! **Cost per call.** The journal is read once when the run starts ([`Tracked`]); afterwards
//! only what other writers appended is read (the live file grew) and every event is folded
//! once into the counters ([`Fold`]), so a check costs the same on a quiet plan of any length.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::abilities::Metering;
use super::binding::PlanBinding;
use crate::dwp::plan::writer::{self, Decision, NewEvent, Tracked};
use crate::dwp::plan::{Contract, EventType, Plan};
use crate::dwp::resources::counters::Family;
use crate::dwp::resources::fold::Fold;
use crate::dwp::resources::{Abilities, limits};
use crate::error::Result;
use crate::fsx::failpoint;
use crate::usage::UsageRecord;

/// The actor identity of this host's samples.
pub fn identity() -> String {
    format!("kxen-agent/{}", env!("CARGO_PKG_VERSION"))
}

/// Where meter artifacts go, relative to the plan folder (what `evidence_path` cites).
pub const ARTIFACT_DIR: &str = "analysis_results/kxen-agent-meter";

/// The schema of one line of a meter artifact.
pub const RECORD_SCHEMA: &str = "kxen-agent/meter-record/v2";

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

/// One plan run's meter and limit check (shared by the run and its `task` children).
pub struct PlanHost {
    pub(super) plan: Plan,
    pub(super) contract: Contract,
    pub binding: PlanBinding,
    abilities: Abilities,
    metering: Metering,
    pub(super) identity: String,
    pub(super) tracked: Tracked,
    /// The resource frame's counters over `tracked`'s events (`folded` of them).
    fold: Fold,
    folded_reads: u64,
    /// Per limit id: whether its latest recovery was recorded while it was over its ceiling.
    accepted: BTreeMap<String, bool>,
    /// Tokens the Session's earlier runs on this plan task used (their children included).
    base: UsageRecord,
    /// This run's tree: the durable cumulative usage of the run and of each of its children.
    runs: BTreeMap<String, UsageRecord>,
    /// This host's latest sampled value per `limit_id` (`""`: a sample without one) and unit.
    sampled: BTreeMap<(String, &'static str), f64>,
    /// Per run: the meter artifact's complete lines and the run usage of its last line.
    artifacts: BTreeMap<String, Artifact>,
    /// A reply without usage was already reported.
    warned_missing_usage: bool,
}

/// What this process knows of one run's meter artifact.
#[derive(Debug, Clone, Copy, Default)]
struct Artifact {
    lines: u64,
    last: UsageRecord,
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
        let mut host = PlanHost {
            plan,
            contract,
            binding,
            abilities: super::abilities::as_frame(abilities),
            metering,
            identity,
            tracked,
            fold: Fold::default(),
            folded_reads: 0,
            accepted: BTreeMap::new(),
            base,
            runs: BTreeMap::new(),
            sampled: BTreeMap::new(),
            artifacts: BTreeMap::new(),
            warned_missing_usage: false,
        };
        host.fold_new();
        Ok(host)
    }

    /// Folds the events the tracked journal gained (all of them after a whole re-read).
    fn fold_new(&mut self) {
        if self.folded_reads != self.tracked.full_reads {
            self.fold = Fold::default();
            self.accepted.clear();
            self.sampled.clear();
            self.folded_reads = self.tracked.full_reads;
        }
        let events = &self.tracked.journal.events;
        for e in &events[self.fold.events.min(events.len())..] {
            if let Some(record) = Fold::limit_record(e)
                && !record.exhausted
                && let Some(limit) = self.contract.limit(&record.limit)
            {
                let over = self.fold.row(limit, &self.abilities).over_ceiling;
                self.accepted.insert(record.limit.clone(), over);
            }
            if e.kind == EventType::ResourceSample
                && e.actor_identity() == self.identity
                && e.trust() == Some("observed")
                && let Some(unit) = [UNIT_TOKENS, UNIT_USD]
                    .into_iter()
                    .find(|u| e.str("unit") == Some(*u))
                && let Some(v) = e.value("value").and_then(|v| v.as_f64())
            {
                let limit = e.str("limit_id").unwrap_or_default().to_string();
                self.sampled.insert((limit, unit), v);
            }
            self.fold.add(e);
        }
    }

    /// Brings the journal (and the counters) up to what other writers appended.
    pub(super) fn refresh(&mut self) -> Result<()> {
        self.tracked.refresh(&self.plan, &self.contract)?;
        self.fold_new();
        Ok(())
    }

    /// Appends the events `decide` returns under the writer lock (see [`writer::append_tracked`]).
    pub(super) fn append(
        &mut self,
        decide: impl FnOnce(&crate::dwp::plan::Journal) -> Result<Vec<NewEvent>>,
    ) -> Result<Vec<crate::dwp::plan::Event>> {
        let written = writer::append_tracked(
            &self.plan,
            &self.contract,
            &mut self.tracked,
            |_| {},
            decide,
        );
        self.fold_new();
        written
    }

    /// How many times the whole journal was read (1 for a run whose plan only grew).
    pub fn full_reads(&self) -> u64 {
        self.tracked.full_reads
    }

    /// Records the durable cumulative usage of a run of this tree (its own model calls).
    pub fn set_usage(&mut self, run_id: &str, usage: UsageRecord) {
        self.runs.insert(run_id.to_string(), usage);
    }

    /// The tree's usage on the plan task: earlier runs, this run, its children.
    pub fn total(&self) -> UsageRecord {
        let mut total = self.base;
        for u in self.runs.values() {
            total.add(*u);
        }
        total
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

    /// The check before a model call of run `run_id` (`run_usage`: its usage so far, all of it
    /// durable; `calls`: its model calls so far). First samples the tree's usage, then refuses
    /// the call on a hold or an over-ceiling enforced limit, recording the exhaustion once.
    pub fn before_call(
        &mut self,
        run_id: &str,
        calls: u64,
        run_usage: UsageRecord,
    ) -> Result<Option<Exhausted>> {
        self.set_usage(run_id, run_usage);
        self.meter(run_id, calls)?;
        failpoint::hit("plan.meter.before-check");
        self.refresh()?;
        if let Some(hold) = self.fold.hold(&self.contract) {
            return Ok(Some(Exhausted {
                limit: hold.limit,
                detail: hold.detail.unwrap_or_default(),
                seq: hold.seq,
                plan_dir: self.binding.dir.clone(),
            }));
        }
        let report = self.fold.report(&self.contract, &self.abilities);
        let over = report.rows.iter().filter(|r| r.over_ceiling).find(|row| {
            // A recovery recorded while the limit was already over its ceiling accepts that
            // overrun: the limit stops this host again only once it is raised and passed anew.
            let recovered = self
                .fold
                .latest(&row.limit_id)
                .is_some_and(|r| !r.exhausted);
            !(recovered && self.accepted.get(&row.limit_id).copied().unwrap_or(false))
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
        let contract = self.contract.clone();
        let written = self.append(|journal| {
            Ok(
                match limits::decide(journal, &contract, true, &limit, Some(&detail))? {
                    Decision::Append(e) => vec![e],
                    Decision::Existing(_) => Vec::new(),
                },
            )
        })?;
        let seq = written
            .first()
            .map(|e| e.seq)
            .or_else(|| self.fold.hold(&self.contract).map(|h| h.seq))
            .unwrap_or_default();
        Ok(Some(Exhausted {
            limit,
            detail,
            seq,
            plan_dir: self.binding.dir.clone(),
        }))
    }

    /// The plan's hold as this host last read the journal, if any.
    pub fn hold(&self) -> Option<Exhausted> {
        self.fold.hold(&self.contract).map(|hold| Exhausted {
            limit: hold.limit,
            detail: hold.detail.unwrap_or_default(),
            seq: hold.seq,
            plan_dir: self.binding.dir.clone(),
        })
    }

    /// For a run whose terminal result is durable (not yet settled): samples the tree's usage
    /// with the run's last reply, or what a crash kept from being sampled. No limit check: no
    /// call follows.
    pub fn before_final(&mut self, run_id: &str, calls: u64, run_usage: UsageRecord) -> Result<()> {
        self.set_usage(run_id, run_usage);
        self.meter(run_id, calls)
    }

    /// After a model call: a warning when a provider that should report usage did not (once
    /// per run tree). The call's usage is sampled once it is durable (the next check).
    pub fn after_call(
        &mut self,
        run_id: &str,
        calls: u64,
        call_usage: Option<UsageRecord>,
    ) -> Option<String> {
        if call_usage.is_some() || !self.metering.reports_usage || self.warned_missing_usage {
            return None;
        }
        self.warned_missing_usage = true;
        Some(format!(
            "model call {calls} of run {run_id} reported no token usage: nothing is metered for \
             it (usage is never estimated)"
        ))
    }

    /// Writes the artifact line and the samples for the tree's usage, unless this host's latest
    /// samples already hold (or exceed) it.
    fn meter(&mut self, run_id: &str, calls: u64) -> Result<()> {
        if !self.metering.reports_usage {
            return Ok(());
        }
        // Another writer's samples do not matter here, but a roll or a replaced journal does:
        // `sampled` is rebuilt from it.
        let total = self.total();
        let tokens = total.input_tokens.saturating_add(total.output_tokens);
        let price = self.metering.price.clone();
        // The same tariff a run's own cost uses (cache reads and writes at their rates).
        let usd = price.as_ref().map(|p| {
            p.cost_usd(
                total.input_tokens,
                total.output_tokens,
                total.cache_read_tokens,
                total.cache_write_tokens,
            )
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
        // Never down, never the same value twice (see the module docs).
        due.retain(|(limit, unit, value)| {
            let last = self.sampled.get(&(limit.clone(), *unit)).copied();
            value.as_f64().is_some_and(|v| last.is_none_or(|l| v > l))
        });
        if due.is_empty() || tokens == 0 {
            return Ok(());
        }
        let run_usage = self.runs.get(run_id).copied().unwrap_or_default();
        let (evidence, line) = self.write_artifact(run_id, calls, run_usage, total, usd, &due)?;
        failpoint::hit("plan.meter.after-artifact");
        let ts = crate::clock::format_seconds(crate::clock::now_millis().div_euclid(1000));
        let source = format!(
            "kxen-agent provider usage ({}){}, meter record line {line}",
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
        self.append(|_| Ok(news))?;
        failpoint::hit("plan.meter.after-sample");
        Ok(())
    }

    /// Durably appends one line to run `run_id`'s meter artifact (created on first use; a torn
    /// last line a crash left is cut first, it was never cited). Returns the path the samples
    /// cite and the line's number.
    fn write_artifact(
        &mut self,
        run_id: &str,
        calls: u64,
        run_usage: UsageRecord,
        total: UsageRecord,
        usd: Option<f64>,
        due: &[(String, &'static str, Value)],
    ) -> Result<(String, u64)> {
        let evidence = format!("{ARTIFACT_DIR}/{run_id}.ndjson");
        let path = self.plan.dir.join(&evidence);
        let known = match self.artifacts.get(run_id) {
            Some(a) => *a,
            None => {
                if let Some(parent) = path.parent() {
                    crate::fsx::create_dir_private(parent)?;
                }
                let file = crate::fsx::read_jsonl_values(&path)?;
                if let Some(tail) = &file.torn_tail {
                    crate::fsx::repair_torn_tail(&path, tail)?;
                }
                let last = file
                    .records
                    .last()
                    .and_then(|r| serde_json::from_value(r["run_usage"].clone()).ok())
                    .unwrap_or_default();
                Artifact {
                    lines: file.records.len() as u64,
                    last,
                }
            }
        };
        let since = UsageRecord {
            input_tokens: run_usage
                .input_tokens
                .saturating_sub(known.last.input_tokens),
            output_tokens: run_usage
                .output_tokens
                .saturating_sub(known.last.output_tokens),
            cache_read_tokens: run_usage
                .cache_read_tokens
                .saturating_sub(known.last.cache_read_tokens),
            cache_write_tokens: run_usage
                .cache_write_tokens
                .saturating_sub(known.last.cache_write_tokens),
        };
        let price = self.metering.price.as_ref();
        let record = json!({
            "schema": RECORD_SCHEMA,
            "host": self.identity,
            "plan": self.binding.plan,
            "task": self.binding.task,
            "run_id": run_id,
            "model_calls": calls,
            "run_usage": run_usage,
            "since_previous_record": since,
            "cumulative": {
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "tokens": total.input_tokens.saturating_add(total.output_tokens),
                "usd": usd,
            },
            "samples": due.iter().map(|(limit, unit, value)| json!({
                "limit_id": if limit.is_empty() { Value::Null } else { Value::from(limit.as_str()) },
                "unit": unit,
                "value": value,
            })).collect::<Vec<_>>(),
            "provider": self.metering.provider,
            "rates": price.map(|p| json!({
                "input_per_million": p.input_per_million,
                "output_per_million": p.output_per_million,
                "currency": p.currency,
            })),
        });
        let line = crate::canonical::to_compact(&record);
        crate::fsx::append_line(&path, &line)?;
        let lines = known.lines + 1;
        self.artifacts.insert(
            run_id.to_string(),
            Artifact {
                lines,
                last: run_usage,
            },
        );
        Ok((evidence, lines))
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
