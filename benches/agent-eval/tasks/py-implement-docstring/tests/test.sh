set -eu
python3 - <<'PY'
from text_utils import slugify
cases = {"Hello, World!": "hello-world", "  Rust & Python 3  ": "rust-python-3",
         "a--b": "a-b", "ABC": "abc", "--x--": "x", "one two  three": "one-two-three"}
for given, want in cases.items():
    got = slugify(given)
    assert got == want, (given, got, want)
PY
