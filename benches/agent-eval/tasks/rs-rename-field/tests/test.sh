if grep -rn qty src; then echo "qty is still mentioned"; exit 1; fi
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rustc --edition 2021 --crate-type lib --crate-name orders -A warnings src/lib.rs -o "$tmp/liborders.rlib"
rustc --edition 2021 --test -A warnings --extern orders="$tmp/liborders.rlib" "$TESTS_DIR/hidden.rs" -o "$tmp/hidden"
"$tmp/hidden" -q
