set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rustc --edition 2021 --crate-type lib --crate-name pct -A warnings src/lib.rs -o "$tmp/libpct.rlib"
rustc --edition 2021 --test -A warnings --extern pct="$tmp/libpct.rlib" "$TESTS_DIR/hidden.rs" -o "$tmp/hidden"
"$tmp/hidden" -q
grep -B1 'pub fn clamp_percent' src/lib.rs | head -1 | grep -q '^ *///' || { echo "clamp_percent has no /// doc comment above it (AGENTS.md)"; exit 1; }
sed -n '/mod tests/,$p' src/lib.rs | grep -q 'clamp_percent(' || { echo "no test calls clamp_percent (AGENTS.md)"; exit 1; }
rustc --edition 2021 --test -A warnings src/lib.rs -o "$tmp/own" && "$tmp/own" -q
