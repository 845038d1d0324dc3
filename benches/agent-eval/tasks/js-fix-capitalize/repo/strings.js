// Upper-cases the first letter of each space-separated word; the rest is left as it is.
function capitalize(text) {
  return text
    .split(" ")
    .map((word) => word.charAt(1).toUpperCase() + word.slice(1))
    .join(" ");
}

module.exports = { capitalize };
