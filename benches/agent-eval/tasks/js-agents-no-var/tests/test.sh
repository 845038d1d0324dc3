set -eu
node -e '
const assert = require("node:assert");
const { average, sum } = require(process.cwd() + "/stats");
assert.strictEqual(average([1, 2, 3, 4]), 2.5);
assert.strictEqual(average([]), 0);
assert.strictEqual(sum([1, 2]), 3);
'
if grep -nE '(^|[^A-Za-z_])var ' stats.js; then echo "stats.js uses var (AGENTS.md forbids it)"; exit 1; fi
grep -B1 -E 'function average|average *=' stats.js | grep -q '^ *//' || { echo "average has no comment above it (AGENTS.md)"; exit 1; }
