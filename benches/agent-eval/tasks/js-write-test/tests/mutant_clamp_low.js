// Broken: ignores the lower bound.
function clamp(value, min, max) {
  return Math.min(value, max);
}

module.exports = { clamp };
