/**
 * Splits `items` into arrays of `size` elements; the last one holds what is left.
 * chunk([1, 2, 3, 4, 5], 2) is [[1, 2], [3, 4], [5]]; chunk([], 3) is [].
 * Throws a RangeError when size is not a positive integer.
 */
function chunk(items, size) {
  throw new Error("not implemented");
}

module.exports = { chunk };
