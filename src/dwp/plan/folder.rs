//! Finding a plan folder and its live contract (docs/dwp-spec.md, "Plan folder layout").

use std::path::{Path, PathBuf};

use super::check::{self, Problem};
use super::contract::{self, Contract};
use crate::error::{Error, Result};

/// A v6/v7 plan folder on disk.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The plan folder, as given.
    pub dir: PathBuf,
    /// The repository root: the parent of `.dwp` when the plan sits at
    /// `<root>/.dwp/plans/<plan>`, otherwise the plan folder's parent.
    pub root: PathBuf,
}

impl Plan {
    /// Opens the plan folder at `dir` (it must exist and look like a v6/v7 plan).
    pub fn open(dir: &Path) -> Result<Plan> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{} is not a directory - --plan names a plan folder (.dwp/plans/PLAN_…)",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::not_found(format!(
                    "plan folder {} does not exist",
                    dir.display()
                ))
                .with_hint("pass the plan folder itself, e.g. --plan .dwp/plans/PLAN_fix_login"));
            }
            Err(e) => return Err(Error::io("open the plan folder", dir, e)),
        }
        Ok(Plan {
            dir: dir.to_path_buf(),
            root: repo_root_of(dir),
        })
    }

    /// The folder name (the plan id of a well-formed plan).
    pub fn folder_name(&self) -> String {
        let abs = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        normalize(&abs)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The live contract: the highest integer `revision` among `contracts/*.json` (files taken
    /// in name order, a non-integer revision skipped), otherwise `contract.json`.
    ///
    /// Once `contracts/` holds a revision file the chain owns the contract: a revision file that
    /// cannot be read or is not a JSON object is refused (exit 4) rather than skipped, since
    /// skipping it would silently derive from an older contract; and a chain with no integer
    /// revision at all never falls back to `contract.json`.
    pub fn live_contract_path(&self) -> Result<PathBuf> {
        let chain = self.dir.join("contracts");
        if chain.is_dir() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(&chain)
                .map_err(|e| Error::io("list", &chain, e))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
                .collect();
            names.sort();
            let mut best: Option<(i64, PathBuf)> = None;
            for path in &names {
                let doc = std::fs::read(path)
                    .map_err(|e| Problem::whole(e.to_string()))
                    .and_then(|b| {
                        serde_json::from_slice::<serde_json::Value>(&b)
                            .map_err(|e| Problem::whole(e.to_string()))
                    })
                    .and_then(|v| {
                        if v.is_object() {
                            Ok(v)
                        } else {
                            Err(Problem::whole("not a JSON object"))
                        }
                    })
                    .map_err(|problem| {
                        problem.in_file("contract", path.display()).with_hint(
                            "the contracts/ chain owns the live contract; repair or remove the damaged revision file",
                        )
                    })?;
                let revision = doc
                    .get("revision")
                    .filter(|r| r.is_i64() || r.is_u64())
                    .and_then(|r| r.as_i64());
                if let Some(rev) = revision
                    && best.as_ref().is_none_or(|(b, _)| rev > *b)
                {
                    best = Some((rev, path.clone()));
                }
            }
            if let Some((_, path)) = best {
                return Ok(path);
            }
            if !names.is_empty() {
                return Err(Error::invalid(format!(
                    "contract invalid: no file in {} has an integer revision",
                    chain.display()
                ))
                .with_hint("the contracts/ chain owns the live contract; it never falls back to contract.json"));
            }
        }
        let single = self.dir.join("contract.json");
        if single.is_file() {
            return Ok(single);
        }
        Err(Error::not_found(format!(
            "no contract.json and no contracts/ chain in {}",
            self.dir.display()
        ))
        .with_hint("is this a v6/v7 DWP plan folder? --plan names .dwp/plans/PLAN_<slug>"))
    }

    /// Reads and validates the live contract; its `plan` must equal the folder name.
    pub fn contract(&self) -> Result<Contract> {
        let path = self.live_contract_path()?;
        let contract = contract::read(&path)?;
        let folder = self.folder_name();
        if contract.plan != folder {
            return Err(Error::invalid(format!(
                "contract invalid: {}: contract.plan {} is not the plan folder's name {}",
                path.display(),
                check::py_repr(&contract.plan),
                check::py_repr(&folder)
            ))
            .with_hint("the plan id and the folder name must be equal"));
        }
        Ok(contract)
    }
}

/// The repository root of a plan folder (docs/dwp-spec.md, "Plan folder layout").
pub fn repo_root_of(dir: &Path) -> PathBuf {
    let abs = normalize(&std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()));
    let plans = abs.parent();
    let dwp = plans.and_then(Path::parent);
    if plans
        .and_then(Path::file_name)
        .is_some_and(|n| n == "plans")
        && dwp.and_then(Path::file_name).is_some_and(|n| n == ".dwp")
        && let Some(root) = dwp.and_then(Path::parent)
    {
        return root.to_path_buf();
    }
    abs.parent().map(Path::to_path_buf).unwrap_or(abs)
}

/// Removes `.` and resolves `..` lexically (no filesystem access, so no symlink surprises).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_the_parent_of_dot_dwp() {
        assert_eq!(
            repo_root_of(Path::new("/r/.dwp/plans/PLAN_a_b")),
            PathBuf::from("/r")
        );
        assert_eq!(
            repo_root_of(Path::new("/r/.dwp/plans/PLAN_a_b/")),
            PathBuf::from("/r")
        );
        assert_eq!(repo_root_of(Path::new("/x/PLAN_a_b")), PathBuf::from("/x"));
    }

    #[test]
    fn missing_plan_is_not_found() {
        let err = Plan::open(Path::new("/nonexistent/PLAN_a_b")).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::NotFound);
    }

    #[test]
    fn highest_integer_revision_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let chain = dir.path().join("contracts");
        std::fs::create_dir_all(&chain).unwrap();
        std::fs::write(chain.join("a.json"), r#"{"revision": 2}"#).unwrap();
        std::fs::write(chain.join("b.json"), r#"{"revision": 10}"#).unwrap();
        std::fs::write(chain.join("c.json"), r#"{"revision": "11"}"#).unwrap();
        std::fs::write(chain.join("d.json"), r#"{"revision": 12.0}"#).unwrap();
        std::fs::write(dir.path().join("contract.json"), r#"{"revision": 1}"#).unwrap();
        let plan = Plan::open(dir.path()).unwrap();
        assert_eq!(plan.live_contract_path().unwrap(), chain.join("b.json"));
    }

    #[test]
    fn a_damaged_revision_is_refused_never_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let chain = dir.path().join("contracts");
        std::fs::create_dir_all(&chain).unwrap();
        std::fs::write(chain.join("001.json"), r#"{"revision": 1}"#).unwrap();
        std::fs::write(dir.path().join("contract.json"), r#"{"revision": 1}"#).unwrap();
        for damaged in ["{", "[1]", "null"] {
            std::fs::write(chain.join("002.json"), damaged).unwrap();
            let plan = Plan::open(dir.path()).unwrap();
            let err = plan.live_contract_path().unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::InvalidInput, "{damaged}");
            assert!(err.message.contains("002.json"), "{}", err.message);
        }
    }

    #[test]
    fn a_chain_without_integer_revisions_never_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let chain = dir.path().join("contracts");
        std::fs::create_dir_all(&chain).unwrap();
        std::fs::write(chain.join("001.json"), r#"{"revision": "x"}"#).unwrap();
        std::fs::write(dir.path().join("contract.json"), r#"{"revision": 1}"#).unwrap();
        let plan = Plan::open(dir.path()).unwrap();
        assert_eq!(
            plan.live_contract_path().unwrap_err().kind,
            crate::ErrorKind::InvalidInput
        );
    }
}
