const USERS = { 1: "ada", 2: "linus" };

function fetchUser(id) {
  return { id, name: USERS[id] || "unknown" };
}

module.exports = { fetchUser };
