//! A run bound to one task of a DWP plan (`kxen-agent run --plan DIR --plan-task T`): its first
//! input is the task text followed by the task's context manifest in Markdown (the bytes
//! `dwp manifest --md` prints), and its record keeps the plan, the task and the manifest's
//! `inputs_fingerprint`, so that a resume continues on the same plan task or is refused.

use std::path::{Path, PathBuf};

use crate::dwp::manifest::{self, Records};
use crate::error::{Error, Result};

/// Recorded in the run's own file, so it is a Session type (`crate::session::run_record`).
pub use crate::session::run_record::PlanBinding;

/// A binding and the first input it gives the run.
pub struct Bound {
    pub binding: PlanBinding,
    /// The task text (or a short instruction), a blank line, then the manifest's Markdown.
    pub first_input: String,
}

/// The plan folder as recorded: canonical (symlinks resolved, so that a symlink on the way to
/// it, which may sit in the agent's workspace, cannot later point a resume at another folder);
/// a folder that does not exist: absolute, `.`/`..` resolved lexically.
pub fn plan_dir(dir: &Path) -> PathBuf {
    if let Ok(canonical) = dir.canonicalize() {
        return canonical;
    }
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    crate::dwp::plan::folder::normalize(&abs)
}

/// Derives the manifest of `task` in the plan at `dir` and composes the run's first input from
/// `text` (the user's task, if any) and the manifest's Markdown.
pub fn bind(dir: &Path, task: &str, text: Option<&str>) -> Result<Bound> {
    let records = Records::load(dir)?;
    let doc = manifest::derive(&records, task, None)?;
    let md = manifest::markdown::render(&doc);
    let fingerprint = doc["freshness"]["inputs_fingerprint"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let title = records
        .contract
        .task(task)
        .map(|t| t.title.clone())
        .unwrap_or_default();
    let head = match text {
        Some(t) => t.trim_end().to_string(),
        None => format!(
            "Work on task {task} ({title}) of plan {}. Its context manifest follows: the \
             authorization, repository rules and acceptance criteria there bind your work; \
             `next_action` says what is due.",
            records.contract.plan
        ),
    };
    Ok(Bound {
        binding: PlanBinding {
            dir: plan_dir(dir),
            plan: records.contract.plan.clone(),
            task: task.to_string(),
            contract_id: records.contract.id.clone(),
            inputs_fingerprint: fingerprint,
        },
        first_input: format!("{head}\n\n{md}"),
    })
}

/// What a resume must name: the plan and task of the run it continues (exit 6 otherwise: the
/// plan is part of what a Session's run was started under, like its policy).
pub fn check_resume(
    recorded: Option<&PlanBinding>,
    given: Option<(&Path, &str)>,
    run_id: &str,
) -> Result<()> {
    let given = given.map(|(d, t)| (plan_dir(d), t));
    match (recorded, given) {
        (None, None) => Ok(()),
        (Some(b), Some((dir, task))) if b.dir == dir && b.task == task => Ok(()),
        (Some(b), given) => Err(Error::policy(format!(
            "run {run_id} works on task {} of plan {} ({}); this resume {}",
            b.task,
            b.plan,
            b.dir.display(),
            match given {
                None => "names no plan".to_string(),
                Some((dir, task)) => format!("names task {task} of {}", dir.display()),
            }
        ))
        .with_hint(format!(
            "resume with `--plan {} --plan-task {}`",
            b.dir.display(),
            b.task
        ))),
        (None, Some((dir, _))) => Err(Error::policy(format!(
            "run {run_id} is not bound to a plan; this resume names {}",
            dir.display()
        ))
        .with_hint("resume without --plan/--plan-task, or start a new run on the plan task")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn binding() -> PlanBinding {
        PlanBinding {
            dir: PathBuf::from("/r/.dwp/plans/PLAN_a_b"),
            plan: "PLAN_a_b".into(),
            task: "T-x".into(),
            contract_id: "c".into(),
            inputs_fingerprint: "f".into(),
        }
    }

    #[test]
    fn resume_names_the_same_plan_task_or_exits_6() {
        let b = binding();
        let dir = Path::new("/r/.dwp/plans/../plans/PLAN_a_b");
        assert!(check_resume(Some(&b), Some((dir, "T-x")), "run_1").is_ok());
        assert!(check_resume(None, None, "run_1").is_ok());
        for (rec, given) in [
            (Some(&b), None),
            (Some(&b), Some((dir, "T-y"))),
            (Some(&b), Some((Path::new("/r/.dwp/plans/PLAN_c_d"), "T-x"))),
            (None, Some((dir, "T-x"))),
        ] {
            let e = check_resume(rec, given, "run_1").unwrap_err();
            assert_eq!(e.kind, ErrorKind::Policy, "{}", e.message);
        }
    }
}
