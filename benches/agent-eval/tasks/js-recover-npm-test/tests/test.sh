set -eu
[ -f test/run.js ] || { echo "test/run.js is gone"; exit 1; }
grep -q 'add(2, 3), 5' test/run.js || { echo "test/run.js was changed"; exit 1; }
out=$(npm test --silent 2>&1) || { echo "npm test fails: $out"; exit 1; }
echo "$out" | grep -q "all tests passed" || { echo "npm test did not run test/run.js: $out"; exit 1; }
