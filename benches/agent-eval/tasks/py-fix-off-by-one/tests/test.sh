set -eu
python3 - <<'PY'
from mathx import total_upto
assert total_upto(3) == 6, total_upto(3)
assert total_upto(1) == 1
assert total_upto(0) == 0
assert total_upto(-4) == 0
assert total_upto(100) == 5050
PY
