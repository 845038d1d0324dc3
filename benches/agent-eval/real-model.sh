#!/bin/sh
# The side-by-side eval on a local model, in one command: starts llama-server (built by the
# machine's real-model setup) with --metrics on PORT, runs the suite with kxen-agent and then
# with mini-swe-agent on the same server, one task at a time, prints the table and stops the
# server. Results go to OUT (default ./eval-out).
#
#   benches/agent-eval/real-model.sh MODEL_DIR [PORT] [OUT] [-- eval.py run options…]
#
# MODEL_DIR holds llama.cpp/build/bin/llama-server, qwen2.5-coder-1.5b.gguf and the chat
# template qwen2.5-coder-fenced-tools.jinja (what `setup.sh MODEL_DIR 1.5b` leaves there).
# Needs: target/release/kxen-agent (or KXEN_AGENT=path), `python3 -m pip install mini-swe-agent`.
#
# Environment: TEMPLATE=FILE picks another chat template in MODEL_DIR (round 3 of docs/eval.md
# used qwen2.5-coder-fenced-tools-nohint.jinja, the same template without the line after tool
# results that tells the model to stop; TEMPLATE=stock uses the template inside the GGUF, with
# which the server returns no tool calls for this model: pair it with `-- --tool-calls-in-text`,
# round 5); THREADS=N the server's -t (default: nproc);
# AGENTS="kxen" runs only some of the agents (default "kxen mini-swe-agent"); PREDICT=N the
# server's answer cap -n (default 1024; pair it with `-- --max-tokens N`). Everything after
# `--` goes to every `eval.py run`, e.g. `-- --verify-before-completion --environment-preamble
# --only … --timeout 300` (the kxen-only flags are ignored for the peers).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 MODEL_DIR [PORT] [OUT] [-- eval.py run options…]" >&2; exit 2; }
dir=$1; shift
port=8088; out=eval-out
if [ $# -ge 1 ] && [ "$1" != -- ]; then port=$1; shift; fi
if [ $# -ge 1 ] && [ "$1" != -- ]; then out=$1; shift; fi
[ "${1:-}" = -- ] && shift
size=${MODEL_SIZE:-1.5b}
template=${TEMPLATE:-qwen2.5-coder-fenced-tools.jinja}
threads=${THREADS:-$(nproc)}
predict=${PREDICT:-1024}
agents=${AGENTS:-kxen mini-swe-agent}
if [ "$template" = stock ]; then
    template_args=
else
    [ -f "$dir/$template" ] || { echo "error: no chat template $dir/$template" >&2; exit 3; }
    template_args="--chat-template-file $dir/$template"
fi
server=$dir/llama.cpp/build/bin/llama-server
[ -x "$server" ] || { echo "error: no llama-server in $dir (run the real-model setup first)" >&2; exit 3; }
bin=${KXEN_AGENT:-$here/../../target/release/kxen-agent}
mkdir -p "$out"

# shellcheck disable=SC2086 # template_args is empty or one option and a path without spaces
nice -n 5 "$server" -m "$dir/qwen2.5-coder-$size.gguf" -a "qwen2.5-coder-$size" \
    --host 127.0.0.1 --port "$port" -c 16384 -np 1 -t "$threads" -n "$predict" --metrics \
    --jinja $template_args --offline --no-webui \
    > "$out/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT INT TERM
i=0
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    i=$((i + 1))
    [ $i -le 120 ] || { echo "error: llama-server did not come up; see $out/server.log" >&2; exit 9; }
    sleep 1
done

url=http://127.0.0.1:$port
for agent in $agents; do
    nice -n 5 python3 "$here/eval.py" run --agent "$agent" --bin "$bin" --endpoint "$url/v1" \
        --model "qwen2.5-coder-$size" --metrics-url "$url/metrics" -j 1 \
        --out "$out/$agent.jsonl" --keep "$out/keep-$agent" "$@"
done
tables=
for agent in $agents; do tables="$tables $out/$agent.jsonl"; done
# shellcheck disable=SC2086 # one path per agent, none with spaces (OUT is ours)
python3 "$here/eval.py" table $tables
