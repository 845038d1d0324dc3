set -eu
node -e '
const assert = require("node:assert");
const { capitalize } = require(process.cwd() + "/strings");
assert.strictEqual(capitalize("hello world"), "Hello World");
assert.strictEqual(capitalize("x"), "X");
assert.strictEqual(capitalize("mIxed case"), "MIxed Case");
assert.strictEqual(capitalize(""), "");
'
