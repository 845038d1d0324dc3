// Returns the sum of the numbers.
function sum(numbers) {
  let total = 0;
  for (const n of numbers) total += n;
  return total;
}

module.exports = { sum };
