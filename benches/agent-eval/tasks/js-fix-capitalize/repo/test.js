const assert = require("node:assert");
const { capitalize } = require("./strings");

assert.strictEqual(capitalize("hello world"), "Hello World");
assert.strictEqual(capitalize("a"), "A");
console.log("ok");
