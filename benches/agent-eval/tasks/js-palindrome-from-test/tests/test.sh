set -eu
node -e '
const assert = require("node:assert");
const { isPalindrome } = require(process.cwd() + "/palindrome");
assert.strictEqual(isPalindrome("racecar"), true);
assert.strictEqual(isPalindrome("Was it a car or a cat I saw?"), true);
assert.strictEqual(isPalindrome("No lemon, no melon"), true);
assert.strictEqual(isPalindrome("abc"), false);
assert.strictEqual(isPalindrome("ab1a"), false);
assert.strictEqual(isPalindrome(""), true);
'
