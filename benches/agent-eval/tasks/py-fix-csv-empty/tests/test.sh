set -eu
python3 - <<'PY'
from scores import parse_scores
assert parse_scores("ann,3\nbob,\n") == {"ann": 3, "bob": 0}
assert parse_scores("ann, 7 \n\ncid , \n") == {"ann": 7, "cid": 0}
assert parse_scores("") == {}
PY
