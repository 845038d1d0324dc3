// Broken: ignores the upper bound.
function clamp(value, min, max) {
  return Math.max(value, min);
}

module.exports = { clamp };
