set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rustc --edition 2021 --crate-type lib --crate-name stats -A warnings src/lib.rs -o "$tmp/libstats.rlib"
rustc --edition 2021 --test -A warnings --extern stats="$tmp/libstats.rlib" "$TESTS_DIR/hidden.rs" -o "$tmp/hidden"
"$tmp/hidden" -q
