cat > array.js <<'JS'
/**
 * Splits `items` into arrays of `size` elements; the last one holds what is left.
 * chunk([1, 2, 3, 4, 5], 2) is [[1, 2], [3, 4], [5]]; chunk([], 3) is [].
 * Throws a RangeError when size is not a positive integer.
 */
function chunk(items, size) {
  if (!Number.isInteger(size) || size < 1) {
    throw new RangeError("size must be a positive integer");
  }
  const out = [];
  for (let i = 0; i < items.length; i += size) {
    out.push(items.slice(i, i + size));
  }
  return out;
}

module.exports = { chunk };
JS
