set -eu
python3 - <<'PY'
from duration import parse_duration
assert parse_duration("45s") == 45
assert parse_duration("2m") == 120
assert parse_duration("1h30m") == 5400
assert parse_duration("2h1m1s") == 7261
for bad in ["ten minutes", "", "5x"]:
    try:
        parse_duration(bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"no ValueError for {bad!r}")
PY
