set -eu
python3 - <<'PY'
from roman import to_roman
for n, want in [(1, "I"), (3, "III"), (4, "IV"), (9, "IX"), (58, "LVIII"), (444, "CDXLIV"),
                (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX")]:
    assert to_roman(n) == want, (n, to_roman(n), want)
PY
