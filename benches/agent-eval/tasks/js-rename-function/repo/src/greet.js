const { fetchUser } = require("./users");

function greet(id) {
  return `hello, ${fetchUser(id).name}`;
}

module.exports = { greet };
