set -eu
python3 - <<'PY'
from tags import add_tag
assert add_tag("a") == ["a"]
assert add_tag("b") == ["b"], add_tag("c")
given = ["x"]
assert add_tag("y", given) == ["x", "y"]
PY
