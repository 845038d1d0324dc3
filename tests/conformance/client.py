#!/usr/bin/env python3
"""kxen-agent as the client of one scenario of the MCP conformance suite.

The suite (npm `@modelcontextprotocol/conformance`) starts a test server for a scenario and runs
`client.py <server-url>` with `MCP_CONFORMANCE_SCENARIO` set. This script does what a user would:
it writes a model config naming the server as `[mcp.servers.conf]`, an agent that requires the
scenario's tool and a scripted model (the `script` provider) that calls it once, then runs
`kxen-agent run` in a fresh git repository with a state dir of its own. For `initialize`, which
serves no tools, it runs `kxen-agent policy check --config` (the handshake and the listing).

Its exit status is kxen-agent's, so a scenario passes only if kxen-agent really did the work:
the suite checks what reached its server and that the client exited 0.

`KXEN_AGENT` names the binary (default: target/debug/kxen-agent of this checkout).
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The tool each scenario's server offers, and the arguments the scripted model passes it.
TOOLS = {
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
# Every auth scenario's server offers this one tool behind its authorization server.
AUTH_TOOL = ("test-tool", {})
# Runtime policy per scenario (beyond `allowMcp`).
POLICIES = {
    # The server asks for a form whose every field has a default: accepting them all is what an
    # unattended run may do, and only when the policy says so.
    "elicitation-sep1034-client-defaults": {"mcpElicitation": "acceptDefaults"},
}


def git(cwd, *args):
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="conformance",
        GIT_AUTHOR_EMAIL="conformance@example.invalid",
        GIT_COMMITTER_NAME="conformance",
        GIT_COMMITTER_EMAIL="conformance@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    if len(sys.argv) < 2:
        print("usage: client.py SERVER_URL (run by the conformance suite)", file=sys.stderr)
        return 2
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    binary = os.environ.get("KXEN_AGENT") or os.path.join(ROOT, "target", "debug", "kxen-agent")

    with tempfile.TemporaryDirectory(prefix="kxen-conformance-") as tmp:
        repo = os.path.join(tmp, "repo")
        os.mkdir(repo)
        git(repo, "init", "-q", "-b", "main")
        write(os.path.join(repo, "README"), "conformance\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "initial")

        if scenario.startswith("auth/"):
            tool, arguments = AUTH_TOOL
        else:
            tool, arguments = TOOLS.get(scenario, (None, None))

        turns = []
        if tool is not None:
            turns.append(
                {
                    "text": "",
                    "toolCalls": [
                        {"id": "c1", "name": f"mcp__conf__{tool}", "arguments": arguments}
                    ],
                }
            )
        turns.append({"text": "done"})
        write(os.path.join(tmp, "turns.jsonl"), "".join(json.dumps(t) + "\n" for t in turns))
        config = os.path.join(tmp, "config.toml")
        server = f"[mcp.servers.conf]\nurl = {json.dumps(url)}\ntimeout_ms = 20000\n"
        child_env = dict(os.environ)
        # Each scenario's tokens in a store of its own (never the user's, never shared).
        child_env["KXEN_TOKEN_DIR"] = os.path.join(tmp, "tokens")
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
        if context.get("client_id"):
            # A pre-registered client: its secret in the environment (a config holds no
            # secret); the unattended client_credentials grant where the scenario is about it,
            # else the authorization code.
            grant = (
                "client_credentials"
                if scenario.startswith("auth/client-credentials")
                else "authorization_code"
            )
            server += (
                "[mcp.servers.conf.oauth]\n"
                f"client_id = {json.dumps(context['client_id'])}\n"
                f"grant = {json.dumps(grant)}\n"
            )
            if context.get("private_key_pem"):
                # private_key_jwt: the key in a file of the user's (0600), named by the config.
                key = os.path.join(tmp, "key.pem")
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(context["private_key_pem"])
                server += f"private_key_file = {json.dumps(key)}\n"
                server += f"signing_algorithm = {json.dumps(context.get('signing_algorithm', 'ES256'))}\n"
            if context.get("client_secret"):
                server += 'client_secret_env = "KXEN_CONFORMANCE_CLIENT_SECRET"\n'
                child_env["KXEN_CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
        elif scenario.startswith("auth/"):
            # No pre-registered client: the Client ID Metadata Document the suite's servers
            # know (used where the authorization server says it takes one, else kxen-agent
            # registers itself).
            server += (
                "[mcp.servers.conf.oauth]\n"
                'client_metadata_url = "https://conformance-test.local/client-metadata.json"\n'
            )
        if scenario.startswith("auth/"):
            # The authorization-code grant needs a person with a browser; the suite's
            # authorization server approves at once, so a browser that follows redirects will do.
            child_env["BROWSER"] = f"{sys.executable} {os.path.join(HERE, 'browser.py')}"
        write(
            config,
            '[providers.model]\nkind = "script"\npath = "turns.jsonl"\n\n'
            '[roles]\nexecution = "model"\nplanning = "model"\n\n' + server,
        )
        policy = os.path.join(tmp, "policy.json")
        write(policy, json.dumps({"allowMcp": True, **POLICIES.get(scenario, {})}))
        common = ["--state-dir", os.path.join(tmp, "state")]

        if tool is None:
            # `initialize` (and any scenario this script does not know): the handshake and the
            # tool listing, as Session creation does them.
            argv = [binary, *common, "policy", "check", "--policy", policy, "--config", config]
        else:
            agent = os.path.join(tmp, "agent.yaml")
            write(
                agent,
                "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata:\n  name: conformance\n"
                "spec:\n  objective: Call the conformance server's tool once.\n"
                "  instructions:\n    - Call the tool.\n  successCriteria: []\n"
                f"  capabilities:\n    required: [mcp__conf__{tool}]\n    optional: []\n"
                "  execution:\n    maxTurns: 4\n"
                "  output: {format: text, requiredFields: []}\n",
            )
            argv = [
                binary, *common, "run", "--workspace", repo, "--task", "conformance",
                "--agent", agent, "--config", config, "--policy", policy,
            ]
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=child_env
        )
        sys.stdout.write(done.stdout)
        # A credential never lands in the state dir: the client secret, or a token the
        # conformance authorization server issued (`cc-token-…`, `test-token-…`).
        canaries = [c for c in (context.get("client_secret"), "cc-token-", "test-token-") if c]
        for root, _, files in os.walk(os.path.join(tmp, "state")):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read()
                for canary in canaries:
                    if canary.encode() in data:
                        print(f"client.py: a credential is in {name}", file=sys.stderr)
                        return 1
        if tool is not None and done.returncode == 0:
            # The run finished; the tool call must have come back as a known, successful outcome.
            finished = [
                json.loads(line)
                for line in done.stdout.splitlines()
                if line.startswith("{") and '"toolFinished"' in line
            ]
            bad = [e for e in finished if e.get("isError") or e.get("outcome") == "unknown"]
            if not finished or bad:
                print(f"client.py: the tool call did not succeed: {finished}", file=sys.stderr)
                return 1
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
