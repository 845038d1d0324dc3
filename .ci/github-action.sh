#!/usr/bin/env bash
# The logic of the kxen-agent GitHub Action (action.yml at the repository root), in one script
# so it can be run and tested outside GitHub: point GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and
# GITHUB_ENV at files and set the INPUT_* variables (tests/it/action.rs does exactly that).
#
#   github-action.sh install   cargo install kxen-agent from the action's own checkout
#   github-action.sh run       run or resume, push, report, summarize
#
# Inputs (environment): INPUT_TASK or INPUT_TASK_FILE, INPUT_AGENT, INPUT_POLICY, INPUT_CONFIG,
# INPUT_ALLOW_SHELL (true/false), INPUT_REMOTE, INPUT_SESSION, INPUT_WORKSPACE.
# Outputs (to $GITHUB_OUTPUT): session-id, status, exit-code, report-path.
# `run` exits with kxen-agent's exit code (0 completed, 7 waits for input, …; README "Exit
# codes") after the outputs, the summary and the report are written.
set -uo pipefail

die() {
    echo "kxen-agent action: $1" >&2
    exit "${2:-2}"
}

install() {
    local src=${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}
    [ -f "$src/Cargo.toml" ] || die "no Cargo.toml in the action's checkout $src" 3
    command -v cargo >/dev/null 2>&1 || die "cargo is not installed (add a Rust toolchain step, e.g. dtolnay/rust-toolchain@stable)" 9
    cargo install --locked --path "$src" --bin kxen-agent || die "cargo install failed" 9
}

# Appends `name=value` to $GITHUB_OUTPUT (values here are ids, statuses, numbers and paths).
output() {
    printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"
}

run() {
    : "${GITHUB_OUTPUT:?GITHUB_OUTPUT must name the output file of the step}"
    : "${GITHUB_STEP_SUMMARY:?GITHUB_STEP_SUMMARY must name the job summary file}"
    local kxen=${KXEN_AGENT_BIN:-kxen-agent}
    command -v "$kxen" >/dev/null 2>&1 || die "$kxen is not installed (the action's install step installs it)" 9
    command -v jq >/dev/null 2>&1 || die "jq is required" 9
    local temp=${RUNNER_TEMP:-${TMPDIR:-/tmp}}
    export KXEN_AGENT_STATE_DIR=${KXEN_AGENT_STATE_DIR:-$temp/kxen-state}
    local workspace=${INPUT_WORKSPACE:-${GITHUB_WORKSPACE:-$PWD}}
    local task=${INPUT_TASK:-} task_file=${INPUT_TASK_FILE:-} remote=${INPUT_REMOTE:-}
    local session=${INPUT_SESSION:-} config=${INPUT_CONFIG:-}
    [ -n "$task" ] && [ -n "$task_file" ] && die "give \`task\` or \`task-file\`, not both"

    local common=(--workspace "$workspace")
    [ -n "$task" ] && common+=(--task "$task")
    [ -n "$task_file" ] && common+=(--task-file "$task_file")
    [ -n "${INPUT_POLICY:-}" ] && common+=(--policy "$INPUT_POLICY")
    case "${INPUT_ALLOW_SHELL:-false}" in
        true) common+=(--allow-shell) ;;
        false | "") ;;
        *) die "allow-shell must be true or false, not \`$INPUT_ALLOW_SHELL\`" ;;
    esac
    [ -n "$config" ] && common+=(--config "$config")

    # Resume through the remote: the Session named by `session`, else the newest one stored on
    # the remote (ids sort by creation time); none there yet: start one.
    if [ -z "$session" ] && [ -n "$remote" ]; then
        local listed
        listed=$("$kxen" session list --remote "$remote" --workspace "$workspace") ||
            die "cannot list the Sessions on remote \`$remote\`" 9
        session=$(printf '%s\n' "$listed" | jq -r 'select(.type == "remoteSession") | .sessionId' | tail -n 1)
    fi

    local events="$temp/kxen-events.jsonl" code=0
    if [ -n "$session" ]; then
        local resume=(--resume "$session")
        [ -n "$remote" ] && resume+=(--remote "$remote")
        echo "kxen-agent action: resuming $session${remote:+ through remote $remote}" >&2
        "$kxen" "${resume[@]}" "${common[@]}" >"$events" || code=$?
    else
        [ -n "$task" ] || [ -n "$task_file" ] || die "a new Session needs \`task\` or \`task-file\`"
        local new=(run)
        [ -n "${INPUT_AGENT:-}" ] && new+=(--agent "$INPUT_AGENT")
        "$kxen" "${new[@]}" "${common[@]}" >"$events" || code=$?
        session=$(jq -r 'select(.sessionId != null) | .sessionId' "$events" | head -n 1)
        if [ -n "$session" ] && [ -n "$remote" ]; then
            # A new Session ran under its local lease; carry it to the remote for the next job.
            "$kxen" session push "$session" --remote "$remote" >/dev/null ||
                { echo "kxen-agent action: pushing $session to $remote failed" >&2; [ "$code" = 0 ] && code=9; }
        fi
    fi
    cat "$events"

    output exit-code "$code"
    if [ -z "$session" ]; then
        local message
        message=$(jq -r 'select(.type == "error") | .message' "$events" | head -n 1)
        output status error
        output session-id ""
        output report-path ""
        {
            echo "### kxen-agent: no Session"
            echo
            echo "kxen-agent stopped before a Session existed (exit $code). See the step's log for the message."
        } >>"$GITHUB_STEP_SUMMARY"
        [ -n "$message" ] && echo "kxen-agent action: $message" >&2
        exit "$code"
    fi
    output session-id "$session"
    [ -n "${GITHUB_ENV:-}" ] && printf 'KXEN_SESSION_ID=%s\n' "$session" >>"$GITHUB_ENV"
    local status
    status=$("$kxen" session show "$session" | jq -r '.runs[-1].status // "none"') || status=unknown
    output status "$status"

    local dir="$temp/kxen-report"
    mkdir -p "$dir"
    local report=(session report "$session" --output "$dir/$session.html" --summary "$dir/summary.md")
    [ -n "$config" ] && report+=(--config "$config")
    if "$kxen" "${report[@]}" >/dev/null; then
        output report-path "$dir/$session.html"
    elif [ -f "$dir/$session.html" ]; then
        # Written, but the Session failed verification (exit 10): the page says what is wrong.
        output report-path "$dir/$session.html"
    else
        output report-path ""
    fi
    if [ -f "$dir/summary.md" ]; then
        cat "$dir/summary.md" >>"$GITHUB_STEP_SUMMARY"
    else
        echo "### kxen-agent Session \`$session\`: no report could be made" >>"$GITHUB_STEP_SUMMARY"
    fi
    echo "- **exit code:** $code" >>"$GITHUB_STEP_SUMMARY"
    exit "$code"
}

case "${1:-}" in
    install) install ;;
    run) run ;;
    *) die "usage: github-action.sh install|run" ;;
esac
