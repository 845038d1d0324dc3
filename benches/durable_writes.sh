#!/bin/sh
# Durable writes per tool call (issue 15): counts fsync/fdatasync/syncfs with `strace -f -c` over
# one scripted run of N `read` calls, one call per model turn (sequential), and over N/4 turns
# of four `read` calls each (started together, group-committed). Target: <= 2 per sequential
# call, <= k + 1 per k calls started together.
#
# Run: sh benches/durable_writes.sh [N]   (builds the debug binary; needs strace)
set -eu
N=${1:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cargo build --quiet --manifest-path "$ROOT/Cargo.toml" --bin kxen-agent
BIN="$ROOT/target/debug/kxen-agent"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
git init -q repo
for j in 0 1 2 3; do echo "line $j" > "repo/f$j.txt"; done
git -C repo add -A
git -C repo -c user.name=bench -c user.email=bench@example.com commit -qm bench
cat > agent.yaml <<'YAML'
apiVersion: kxen.ai/v1alpha1
kind: DCPAgent
metadata: {name: bench}
spec:
  objective: Read files many times.
  instructions: [Read.]
  capabilities: {required: [read], optional: []}
  execution: {maxTurns: 1024, maxRepeatedCalls: 0}
YAML
python3 - "$N" <<'PY'
import json, sys
n = int(sys.argv[1])
with open("seq.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"text": "", "toolCalls": [{"id": f"c{i}", "name": "read", "arguments": {"path": "f0.txt"}}]}) + "\n")
    f.write(json.dumps({"text": "done"}) + "\n")
with open("par.jsonl", "w") as f:
    for i in range(n // 4):
        f.write(json.dumps({"text": "", "toolCalls": [{"id": f"c{i}_{j}", "name": "read", "arguments": {"path": f"f{j}.txt"}} for j in range(4)]}) + "\n")
    f.write(json.dumps({"text": "done"}) + "\n")
PY
measure() { # NAME SCRIPT CALLS TURNS
    printf '[providers.s]\nkind = "script"\npath = "%s"\n[roles]\nexecution = "s"\n' "$2" > "$1.toml"
    strace -f -c -e trace=fsync,fdatasync,syncfs -o "$1.strace" \
        env -i PATH=/usr/bin:/bin HOME="$DIR" KXEN_AGENT_STATE_DIR="$DIR/state-$1" \
        "$BIN" run --workspace repo --task bench --agent agent.yaml --config "$1.toml" > /dev/null
    syncs=$(awk '$NF ~ /^(fsync|fdatasync|syncfs)$/ {n += $4} END {print n + 0}' "$1.strace")
    datasyncs=$(awk '$NF == "fdatasync" {print $4}' "$1.strace")
    echo "$1: $3 calls in $4 turns: $syncs syncs ($datasyncs fdatasync); per call $(echo "scale=3; $datasyncs / $3" | bc) fdatasync, per turn $(echo "scale=3; $datasyncs / $4" | bc)"
}
measure sequential seq.jsonl "$N" "$N"
measure parallel4 par.jsonl $((N / 4 * 4)) $((N / 4))
