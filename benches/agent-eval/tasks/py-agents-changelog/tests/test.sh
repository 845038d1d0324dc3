set -eu
python3 -c 'from convert import celsius_to_fahrenheit as f; assert f(100) == 212 and f(0) == 32 and f(-40) == -40'
python3 - <<'PY'
text = open("CHANGELOG.md").read()
unreleased = text.split("## Unreleased", 1)[1].split("\n## ", 1)[0]
lines = [l for l in unreleased.splitlines() if l.startswith("- ")]
assert lines, "no entry under ## Unreleased in CHANGELOG.md"
assert any("celsius" in l.lower() for l in lines), f"the entry does not name the change: {lines}"
PY
