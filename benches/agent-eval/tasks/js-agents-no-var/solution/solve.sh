cat > stats.js <<'JS'
// Returns the sum of the numbers.
function sum(numbers) {
  let total = 0;
  for (const n of numbers) total += n;
  return total;
}

// Returns the arithmetic mean of the numbers (0 for none).
function average(numbers) {
  return numbers.length === 0 ? 0 : sum(numbers) / numbers.length;
}

module.exports = { sum, average };
JS
