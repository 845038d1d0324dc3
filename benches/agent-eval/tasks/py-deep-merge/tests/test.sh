set -eu
python3 - <<'PY'
from merge import deep_merge
base = {"a": 1, "b": {"x": 1, "y": {"deep": 1}}}
over = {"b": {"y": {"deeper": 2}}, "c": 3}
got = deep_merge(base, over)
assert got == {"a": 1, "b": {"x": 1, "y": {"deep": 1, "deeper": 2}}, "c": 3}, got
assert base == {"a": 1, "b": {"x": 1, "y": {"deep": 1}}}, "base was modified"
assert deep_merge({"a": {"x": 1}}, {"a": 5}) == {"a": 5}
assert deep_merge({}, {}) == {}
PY
