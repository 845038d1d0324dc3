set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rustc --edition 2021 --crate-type lib --crate-name fizz -A warnings src/lib.rs -o "$tmp/libfizz.rlib"
rustc --edition 2021 --test -A warnings --extern fizz="$tmp/libfizz.rlib" "$TESTS_DIR/hidden.rs" -o "$tmp/hidden"
"$tmp/hidden" -q
