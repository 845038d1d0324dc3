cat >> convert.py <<'PY'


def celsius_to_fahrenheit(c):
    """Degrees Celsius to degrees Fahrenheit."""
    return c * 9 / 5 + 32
PY
python3 - <<'PY'
t = open("CHANGELOG.md").read()
t = t.replace("## Unreleased\n", "## Unreleased\n\n- `celsius_to_fahrenheit`.\n", 1)
open("CHANGELOG.md", "w").write(t)
PY
