#!/usr/bin/env python3
"""The agent eval harness: runs task folders against an agent and checks the result itself.

A task is a folder in the Harbor / Terminal-Bench layout (see docs/eval.md):

    instruction.md      the task, given to the agent verbatim
    task.toml           optional: [metadata] language/category, [agent] timeout_sec
    repo/               the repository files; each attempt gets a fresh copy made a git repo
    tests/test.sh       the check, run with the workspace as cwd and $TESTS_DIR set
    solution/solve.sh   optional reference solution, run with the workspace as cwd

Pass/fail is always the check run after the agent has finished, never the agent's own claim.

Commands:

    eval.py verify [--tasks DIR] [--only NAME ...] [-j N] [--out FILE]
        every task's unsolved repository fails its check and its solution passes it
    eval.py run --agent kxen|mini-swe-agent [--config FILE | --endpoint URL --model NAME
                | --script-solution] [--bin PATH] [-j N] [--timeout S] [--out FILE] ...
        runs the agent on each task in a fresh copy, N at a time, writes one JSON line per task
        and prints a summary table
    eval.py table FILE [FILE ...]
        the side-by-side table of one or more result files

Standard library only, so it runs on a fresh machine with nothing but python3.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_TASKS = HERE / "tasks"
DEFAULT_BIN = HERE.parent.parent / "target" / "release" / "kxen-agent"
# The parts of a task folder that are not handed to the agent.
CHECK_TIMEOUT_S = 120
GIT_ENV = {
    "GIT_AUTHOR_NAME": "eval",
    "GIT_AUTHOR_EMAIL": "eval@example.invalid",
    "GIT_COMMITTER_NAME": "eval",
    "GIT_COMMITTER_EMAIL": "eval@example.invalid",
}


class UsageError(Exception):
    """A mistake in the command line or a task folder: exit 2 (usage) or 4 (invalid input)."""

    def __init__(self, message, code=2):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# Tasks


class Task:
    def __init__(self, path):
        self.path = path
        self.name = path.name
        self.instruction = (path / "instruction.md").read_text()
        meta_file = path / "task.toml"
        try:
            self.meta = tomllib.loads(meta_file.read_text()) if meta_file.exists() else {}
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"{meta_file}: {e}", 4) from e
        self.repo = path / "repo"
        self.test = path / "tests" / "test.sh"
        self.solution = path / "solution" / "solve.sh"
        if not self.repo.is_dir():
            raise UsageError(f"{path}: a task needs a repo/ folder", 4)
        if not self.test.is_file():
            raise UsageError(f"{path}: a task needs tests/test.sh", 4)

    @property
    def language(self):
        return self.meta.get("metadata", {}).get("language", "")

    @property
    def category(self):
        return self.meta.get("metadata", {}).get("category", "")

    def timeout(self, default):
        return self.meta.get("agent", {}).get("timeout_sec", default)


def load_tasks(tasks_dir, only):
    tasks_dir = Path(tasks_dir)
    if not tasks_dir.is_dir():
        raise UsageError(f"no task folder at {tasks_dir}", 3)
    tasks = [Task(p) for p in sorted(tasks_dir.iterdir()) if (p / "instruction.md").is_file()]
    if only:
        known = {t.name for t in tasks}
        missing = [n for n in only if n not in known]
        if missing:
            raise UsageError(f"no such task: {', '.join(missing)} (in {tasks_dir})", 3)
        tasks = [t for t in tasks if t.name in only]
    if not tasks:
        raise UsageError(f"no tasks in {tasks_dir}", 3)
    return tasks


def git(cwd, *args):
    env = dict(os.environ, **GIT_ENV)
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def fresh_workspace(task, parent):
    """A fresh copy of the task's repository, committed as the first commit of a new git repo."""
    work = parent / "work"
    shutil.copytree(task.repo, work, symlinks=True)
    git(work, "init", "-q")
    git(work, "symbolic-ref", "HEAD", "refs/heads/main")
    git(work, "add", "-A")
    git(work, "-c", "commit.gpgsign=false", "commit", "-q", "-m", f"task {task.name}")
    return work


def run_shell(script, cwd, env_extra, timeout):
    """Runs `sh script` in its own process group; returns (exit code, output tail)."""
    env = dict(os.environ, **env_extra)
    proc = subprocess.Popen(
        ["sh", str(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        return 124, tail(out.decode(errors="replace") + f"\n[timed out after {timeout} s]")
    return proc.returncode, tail(out.decode(errors="replace"))


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tail(text, limit=1500):
    return text if len(text) <= limit else "…" + text[-limit:]


def run_check(task, work):
    code, out = run_shell(task.test, work, {"TESTS_DIR": str(task.test.parent)}, CHECK_TIMEOUT_S)
    return code == 0, code, out


def apply_solution(task, work):
    if not task.solution.is_file():
        raise UsageError(f"{task.path}: no solution/solve.sh", 4)
    code, out = run_shell(
        task.solution, work, {"SOLUTION_DIR": str(task.solution.parent)}, CHECK_TIMEOUT_S
    )
    if code != 0:
        raise RuntimeError(f"{task.name}: solution/solve.sh exited {code}: {out}")


# ---------------------------------------------------------------------------------------------
# verify: the unsolved repository fails, the solution passes


def verify_task(task):
    with tempfile.TemporaryDirectory(prefix=f"eval-{task.name}-") as tmp:
        tmp = Path(tmp)
        (tmp / "a").mkdir()
        (tmp / "b").mkdir()
        unsolved_pass, unsolved_code, unsolved_out = run_check(task, fresh_workspace(task, tmp / "a"))
        work = fresh_workspace(task, tmp / "b")
        try:
            apply_solution(task, work)
            solved_pass, solved_code, solved_out = run_check(task, work)
        except (RuntimeError, UsageError) as e:
            solved_pass, solved_code, solved_out = False, -1, str(e)
    return {
        "task": task.name,
        "ok": (not unsolved_pass) and solved_pass,
        "unsolvedExit": unsolved_code,
        "solvedExit": solved_code,
        "unsolvedOutput": unsolved_out if unsolved_pass else "",
        "solvedOutput": "" if solved_pass else solved_out,
    }


def cmd_verify(args):
    tasks = load_tasks(args.tasks, args.only)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(verify_task, tasks))
    lines = "".join(json.dumps(r) + "\n" for r in results)
    if args.out:
        Path(args.out).write_text(lines)
    else:
        sys.stdout.write(lines)
    bad = [r["task"] for r in results if not r["ok"]]
    print(f"{len(results) - len(bad)}/{len(results)} tasks verified", file=sys.stderr)
    for r in results:
        if not r["ok"]:
            print(
                f"  {r['task']}: unsolved exit {r['unsolvedExit']}, solved exit {r['solvedExit']}"
                f"\n{r['unsolvedOutput']}{r['solvedOutput']}",
                file=sys.stderr,
            )
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------
# Server metrics (llama-server --metrics): tokens a peer used, read before and after a task


def read_metrics(url):
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = {}
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"):
        m = re.search(rf"^{re.escape(name)}\s+([0-9.e+]+)$", text, re.M)
        if m:
            values[name] = float(m.group(1))
    return values


def metrics_delta(before, after):
    if not before or not after:
        return None
    return {
        "promptTokens": int(after.get("llamacpp:prompt_tokens_total", 0)
                            - before.get("llamacpp:prompt_tokens_total", 0)),
        "predictedTokens": int(after.get("llamacpp:tokens_predicted_total", 0)
                               - before.get("llamacpp:tokens_predicted_total", 0)),
    }


# ---------------------------------------------------------------------------------------------
# Agents. Each returns a dict of what it knows about the run; the harness adds the check.

AGENT_YAML = """\
apiVersion: kxen.ai/v1alpha1
kind: DCPAgent
metadata:
  name: eval_agent
  description: Completes one small repository task of the eval suite.
spec:
  objective: Complete the task in the repository, with evidence.
  instructions:
    - Read the files the task is about before changing them.
    - Run the check the task names after your last change and report what it printed.
  successCriteria:
    - The task's check passes.
  capabilities:
    required: [read, glob, grep]
    optional: [edit, write, exec]
  execution:
    modelRole: execution
    maxTurns: {max_turns}
    maxWallClockMs: {wall_ms}
    maxPureRetries: 1{verify}
  output:
    format: text
    requiredFields: []
"""


def endpoint_config(endpoint, model, max_tokens, text_calls=False):
    return (
        "[providers.eval]\n"
        'kind = "openai"\n'
        f"base_url = {json.dumps(endpoint)}\n"
        f"model = {json.dumps(model)}\n"
        "temperature = 0\n"
        f"max_tokens = {max_tokens}\n"
        + ("tool_calls_in_text = true\n" if text_calls else "")
        + "timeout_ms = 600000\n\n"
        "[roles]\n"
        'execution = "eval"\n'
        'planning = "eval"\n'
    )


def solution_turns(task, tmp):
    """A script of model turns that applies the reference solution with the agent's own tools:
    the files solve.sh changes are read (if they existed) and written, the ones it removes are
    removed with `exec`, then the answer. Used to test the harness without a model."""
    before = tmp / "before"
    before.mkdir()
    work = fresh_workspace(task, before)
    snapshot = tree(work)
    apply_solution(task, work)
    after = tree(work)
    turns, n = [], 0

    def call(name, arguments):
        nonlocal n
        n += 1
        turns.append({
            "text": "",
            "toolCalls": [{"id": f"call_{n}", "name": name, "arguments": arguments}],
            "usage": {"inputTokens": 100 * n, "outputTokens": 10},
        })

    for path in sorted(set(snapshot) | set(after)):
        if path in after and snapshot.get(path) != after[path]:
            if path in snapshot:
                call("read", {"path": path})
            call("write", {"path": path, "content": after[path]})
        elif path not in after:
            call("exec", {"command": f"rm -- '{path}'"})
    turns.append({"text": "Applied the reference solution.",
                  "usage": {"inputTokens": 100 * (n + 1), "outputTokens": 10}})
    shutil.rmtree(before)
    return "".join(json.dumps(t) + "\n" for t in turns)


def tree(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            p = Path(dirpath) / f
            files[str(p.relative_to(root))] = p.read_text(errors="replace")
    return files


def price_of(config_path):
    """The execution provider's [providers.NAME.price] table, if the config has one."""
    try:
        config = tomllib.loads(Path(config_path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    name = config.get("roles", {}).get("execution")
    return config.get("providers", {}).get(name, {}).get("price")


def run_kxen(task, work, tmp, args, timeout):
    agent = tmp / "agent.yaml"
    verify = "\n    verifyBeforeCompletion: true" if args.verify_before_completion else ""
    if args.environment_preamble:
        verify += "\n    environmentPreamble: true"
    agent.write_text(AGENT_YAML.format(max_turns=args.max_turns, wall_ms=int(timeout * 1000),
                                       verify=verify))
    if args.script_solution:
        (tmp / "turns.jsonl").write_text(solution_turns(task, tmp))
        config = tmp / "config.toml"
        config.write_text(
            '[providers.script]\nkind = "script"\npath = "turns.jsonl"\n\n'
            '[roles]\nexecution = "script"\nplanning = "script"\n'
        )
    elif args.config:
        config = Path(args.config).resolve()
    else:
        config = tmp / "config.toml"
        config.write_text(endpoint_config(args.endpoint, args.model, args.max_tokens,
                                          args.tool_calls_in_text))
    state = tmp / "state"
    argv = [
        str(args.bin), "run", "--workspace", str(work), "--task-file",
        str(task.path / "instruction.md"), "--agent", str(agent), "--config", str(config),
        "--allow-shell", "--state-dir", str(state), "--format", "jsonl",
    ]
    code, stdout, stderr, timed_out = run_agent_process(argv, tmp, timeout + 30, {})
    (tmp / "events.jsonl").write_text(stdout)
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    finished = next((e for e in events if e.get("type") == "runFinished"), None)
    started = next((e for e in events if e.get("type") == "runStarted"), None)
    created = next((e for e in events if e.get("type") == "sessionCreated"), None)
    result = {"exit": code, "timedOut": timed_out, "stderr": tail(stderr, 600)}
    ses = (finished or started or created or {}).get("sessionId")
    run = (finished or started or {}).get("runId")
    if ses and run:
        show = subprocess.run(
            [str(args.bin), "run", "show", ses, run, "--state-dir", str(state), "--format", "jsonl"],
            capture_output=True, text=True,
        )
        record = next((json.loads(line) for line in show.stdout.splitlines()
                       if line.startswith('{"type":"run"')), None)
        if record:
            r = record["run"]
            res = r.get("result") or {}
            usage = res.get("usage") or {}
            result.update({
                "status": r.get("status"),
                "reason": res.get("reason"),
                "unverified": res.get("unverified"),
                "turns": res.get("turns"),
                "toolCalls": len(record.get("operations", [])),
                "inputTokens": usage.get("inputTokens"),
                "outputTokens": usage.get("outputTokens"),
                "agentWallMs": sum(a.get("wallClockMs") or 0 for a in r.get("attempts", [])),
                "finalText": tail(res.get("finalText") or "", 400),
            })
            # Calls refused before they started (repeats, unknown tools) have no journal
            # operation; count every call the model made from the events instead.
            calls = sum(1 for e in events if e.get("type") == "toolStarted")
            result["toolCalls"] = max(result["toolCalls"], calls)
    price = None if args.script_solution else price_of(config)
    if price and result.get("inputTokens") is not None:
        result["cost"] = round(
            result["inputTokens"] * price.get("input_per_million", 0) / 1e6
            + result["outputTokens"] * price.get("output_per_million", 0) / 1e6, 6)
    return result


MINI_CONFIG = """\
agent:
  step_limit: {max_turns}
  cost_limit: 0
model:
  model_name: "openai/{model}"
  cost_tracking: ignore_errors{model_class}
  model_kwargs:
    api_base: "{endpoint}"
    api_key: "none"
    temperature: 0
    max_tokens: {max_tokens}
environment:
  timeout: 60
"""


def run_mini(task, work, tmp, args, timeout):
    """mini-swe-agent (PyPI `mini-swe-agent`), in yolo mode, on the same endpoint."""
    exe = shutil.which("mini")
    if not exe:
        raise UsageError("mini-swe-agent is not installed: python3 -m pip install mini-swe-agent", 9)
    if not args.endpoint:
        raise UsageError("--agent mini-swe-agent needs --endpoint and --model")
    traj = tmp / "trajectory.json"
    config = tmp / "mini.yaml"
    # The text-based config asks for a ```mswea_bash_command block instead of a tool call;
    # its parser is the litellm_textbased model class, which the config file does not name.
    textbased = args.mini_config == "mini_textbased.yaml"
    model_class = "\n  model_class: litellm_textbased" if textbased else ""
    config.write_text(MINI_CONFIG.format(max_turns=args.max_turns, max_tokens=args.max_tokens, model=args.model,
                                         endpoint=args.endpoint, model_class=model_class))
    argv = [exe, "-y", "--exit-immediately", "-c", args.mini_config, "-c", str(config),
            "-t", task.instruction, "-o", str(traj)]
    env = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    code, stdout, stderr, timed_out = run_agent_process(argv, work, timeout, env)
    result = {"exit": code, "timedOut": timed_out, "stderr": tail(stderr, 600)}
    if traj.exists():
        try:
            data = json.loads(traj.read_text())
        except ValueError:
            data = {}
        info = data.get("info", {})
        messages = data.get("messages", [])
        assistant = [m for m in messages if m.get("role") == "assistant"]
        usage = [((m.get("extra") or {}).get("response") or {}).get("usage") or {}
                 for m in assistant]
        result["status"] = info.get("exit_status")
        result["turns"] = info.get("model_stats", {}).get("api_calls", len(assistant))
        result["toolCalls"] = sum(len((m.get("extra") or {}).get("actions") or [])
                                  for m in assistant)
        if any(usage):
            # What the endpoint reported per call (a cached prompt prefix still counts).
            result["inputTokens"] = sum(u.get("prompt_tokens") or 0 for u in usage)
            result["outputTokens"] = sum(u.get("completion_tokens") or 0 for u in usage)
        result["finalText"] = tail(str(info.get("submission") or ""), 400)
    return result


def run_agent_process(argv, cwd, timeout, env_extra):
    env = dict(os.environ, **env_extra)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            kill_group(proc)
            out, err = proc.communicate()
        timed_out = True
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), timed_out


AGENTS = {"kxen": run_kxen, "mini-swe-agent": run_mini}


def run_task(task, args, lock, out):
    timeout = task.timeout(args.timeout) if args.timeout_from_task else args.timeout
    with tempfile.TemporaryDirectory(prefix=f"eval-{task.name}-") as tmp:
        tmp = Path(tmp)
        work = fresh_workspace(task, tmp)
        before = read_metrics(args.metrics_url)
        start = time.monotonic()
        try:
            result = AGENTS[args.agent](task, work, tmp, args, timeout)
        except (OSError, RuntimeError, ValueError) as e:
            # The agent could not be run or left output the harness cannot read: a failed
            # attempt with the reason, and the check still decides.
            result = {"exit": None, "error": str(e)}
        wall = time.monotonic() - start
        server = metrics_delta(before, read_metrics(args.metrics_url))
        passed, check_code, check_out = run_check(task, work)
        if args.keep:
            keep = Path(args.keep) / task.name
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(tmp, keep, symlinks=True)
    row = {
        "task": task.name,
        "agent": args.agent,
        "label": args.label or args.agent,
        "language": task.language,
        "category": task.category,
        "passed": passed,
        "checkExit": check_code,
        "wallS": round(wall, 1),
        **result,
    }
    if server:
        row["server"] = server
    if not passed:
        row["checkOutput"] = tail(check_out, 600)
    with lock:
        out.write(json.dumps(row) + "\n")
        out.flush()
        if not args.quiet:
            print(f"{task.name}: {'PASS' if passed else 'fail'} ({row['wallS']} s, "
                  f"status {row.get('status')})", file=sys.stderr, flush=True)
    return row


def cmd_run(args):
    if args.agent == "kxen" and not (args.config or args.endpoint or args.script_solution):
        raise UsageError("--agent kxen needs --config FILE, --endpoint URL --model NAME "
                         "or --script-solution")
    if args.endpoint and not args.model:
        raise UsageError("--endpoint needs --model")
    args.bin = Path(args.bin).resolve()
    if args.agent == "kxen" and not args.bin.is_file():
        raise UsageError(f"no kxen-agent binary at {args.bin} (build it: cargo build --release, "
                         "or pass --bin)", 3)
    tasks = load_tasks(args.tasks, args.only)
    lock = threading.Lock()
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w") as out:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(lambda t: run_task(t, args, lock, out), tasks))
    print_table([rows])
    return 0


# ---------------------------------------------------------------------------------------------
# Tables


def print_table(groups):
    labels = [g[0]["label"] if g else "?" for g in groups]
    by_task = {}
    for g in groups:
        for row in g:
            by_task.setdefault(row["task"], {})[row["label"]] = row
    head = f"{'task':<28}" + "".join(f" | {lab[:30]:<30}" for lab in labels)
    print(head)
    print("-" * len(head))
    for name in sorted(by_task):
        cells = []
        for lab in labels:
            r = by_task[name].get(lab)
            cells.append(cell(r) if r else "-")
        print(f"{name:<28}" + "".join(f" | {c:<30}" for c in cells))
    print("-" * len(head))
    totals = []
    for g in groups:
        solved = [r for r in g if r["passed"]]
        tokens = [tokens_in(r) for r in g]
        known = [t for t in tokens if t is not None]
        solved_tokens = sum(tokens_in(r) or 0 for r in solved)
        per = f"{solved_tokens // len(solved)}" if solved and known else "-"
        totals.append(f"{len(solved)}/{len(g)} passed, {sum(r['wallS'] for r in g):.0f} s, "
                      f"in/solved {per}")
    print(f"{'total':<28}" + "".join(f" | {t:<30}" for t in totals))
    # An agent that reports success the check does not confirm: the runtime's word against
    # the task's. A kxen run that ended `unverified` did not claim a success it saw.
    false = [sum(1 for r in g if claimed_success(r) and not r["passed"]) for g in groups]
    print(f"{'claimed done, check failed':<28}" + "".join(f" | {n:<30}" for n in false))


def claimed_success(r):
    """The agent ended as if the work were done (kxen `completed` without `unverified`,
    mini-swe-agent `Submitted`)."""
    return (r.get("status") == "completed" and not r.get("unverified")) \
        or r.get("status") == "Submitted"


def tokens_in(r):
    if r.get("inputTokens") is not None:
        return r["inputTokens"]
    if r.get("server"):
        return r["server"]["promptTokens"]
    return None


def cell(r):
    mark = "PASS" if r["passed"] else "fail"
    t_in = tokens_in(r)
    t_out = r.get("outputTokens")
    if t_out is None and r.get("server"):
        t_out = r["server"]["predictedTokens"]
    tok = f"{t_in}/{t_out}" if t_in is not None else "-"
    return f"{mark} {r['wallS']:.0f}s {r.get('turns', '-')}t {tok}"


def cmd_table(args):
    groups = []
    for f in args.files:
        try:
            rows = [json.loads(line) for line in Path(f).read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as e:
            raise UsageError(f"{f}: {e}", 4) from e
        groups.append(rows)
    print_table(groups)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="eval.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("verify", help="the unsolved repos fail their check, the solutions pass")
    v.add_argument("--tasks", default=DEFAULT_TASKS)
    v.add_argument("--only", nargs="*", default=[])
    v.add_argument("-j", "--jobs", type=int, default=2)
    v.add_argument("--out")
    v.set_defaults(func=cmd_verify)

    r = sub.add_parser("run", help="run an agent on the tasks and check the results")
    r.add_argument("--agent", choices=sorted(AGENTS), default="kxen")
    r.add_argument("--tasks", default=DEFAULT_TASKS)
    r.add_argument("--only", nargs="*", default=[])
    r.add_argument("--config", help="kxen-agent model config (TOML)")
    r.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8088/v1")
    r.add_argument("--model", help="the model name the endpoint serves")
    r.add_argument("--script-solution", action="store_true",
                   help="kxen only: a script provider that applies each reference solution")
    r.add_argument("--bin", default=str(DEFAULT_BIN), help="the kxen-agent binary")
    r.add_argument("-j", "--jobs", type=int, default=1)
    r.add_argument("--timeout", type=float, default=300, help="seconds per task (default 300)")
    r.add_argument("--timeout-from-task", action="store_true",
                   help="use a task's [agent] timeout_sec when it has one")
    r.add_argument("--max-turns", type=int, default=30)
    r.add_argument("--tool-calls-in-text", action="store_true",
                   help="kxen: read tool calls the model writes into its text (provider option)")
    r.add_argument("--mini-config", choices=["mini.yaml", "mini_textbased.yaml"], default="mini.yaml",
                   help="mini-swe-agent: its built-in config (mini_textbased.yaml reads a command "
                        "block from the text, for a server that returns no tool calls)")
    r.add_argument("--max-tokens", type=int, default=1024,
                   help="the model's answer cap per turn, for every agent (default 1024)")
    r.add_argument("--verify-before-completion", action="store_true",
                   help="kxen only: set the definition's verifyBeforeCompletion (a binary before "
                        "it existed refuses the field)")
    r.add_argument("--environment-preamble", action="store_true",
                   help="kxen only: set the definition's environmentPreamble (a workspace "
                        "listing in the first turn; a binary before it existed refuses it)")
    r.add_argument("--metrics-url", help="llama-server /metrics, read before and after each task")
    r.add_argument("--label", help="the column name in tables (default: the agent)")
    r.add_argument("--out", default="eval-results.jsonl")
    r.add_argument("--keep", help="copy each task's workspace, state and logs here")
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(func=cmd_run)

    t = sub.add_parser("table", help="print the side-by-side table of result files")
    t.add_argument("files", nargs="+")
    t.set_defaults(func=cmd_table)

    args = p.parse_args(argv)
    if getattr(args, "jobs", 1) < 1:
        p.error("--jobs must be at least 1")
    try:
        return args.func(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
