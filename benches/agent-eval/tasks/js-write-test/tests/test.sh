set -eu
[ -f clamp.test.js ] || { echo "no clamp.test.js"; exit 1; }
node clamp.test.js || { echo "the tests fail on the real clamp"; exit 1; }
for m in mutant_clamp.js mutant_clamp_low.js; do
    tmp=$(mktemp -d); cp clamp.test.js "$tmp/"; cp "$TESTS_DIR/$m" "$tmp/clamp.js"
    if (cd "$tmp" && node clamp.test.js >/dev/null 2>&1); then
        echo "the tests also pass on a broken clamp ($m)"; rm -rf "$tmp"; exit 1
    fi
    rm -rf "$tmp"
done
