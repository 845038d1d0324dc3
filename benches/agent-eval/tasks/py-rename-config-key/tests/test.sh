set -eu
python3 - <<'PY'
import json
s = json.load(open("settings.json"))
assert "timeout" not in s and s.get("timeout_seconds") == 30, s
PY
[ "$(python3 app.py)" = "timeout 30" ] || { echo "app.py printed: $(python3 app.py)"; exit 1; }
