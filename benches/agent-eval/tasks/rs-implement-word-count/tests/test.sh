set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rustc --edition 2021 --crate-type lib --crate-name words -A warnings src/lib.rs -o "$tmp/libwords.rlib"
rustc --edition 2021 --test -A warnings --extern words="$tmp/libwords.rlib" "$TESTS_DIR/hidden.rs" -o "$tmp/hidden"
"$tmp/hidden" -q
