const assert = require("node:assert");
const { isPalindrome } = require("./palindrome");

// Case, spaces and punctuation do not count.
assert.strictEqual(isPalindrome("racecar"), true);
assert.strictEqual(isPalindrome("A man, a plan, a canal: Panama"), true);
assert.strictEqual(isPalindrome("hello"), false);
assert.strictEqual(isPalindrome(""), true);
console.log("ok");
