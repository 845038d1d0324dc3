set -eu
node -e '
const assert = require("node:assert");
const { chunk } = require(process.cwd() + "/array");
assert.deepStrictEqual(chunk([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]);
assert.deepStrictEqual(chunk([1, 2, 3], 3), [[1, 2, 3]]);
assert.deepStrictEqual(chunk([], 3), []);
assert.throws(() => chunk([1], 0), RangeError);
assert.throws(() => chunk([1], 1.5), RangeError);
'
