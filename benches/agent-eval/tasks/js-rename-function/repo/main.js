const { greet } = require("./src/greet");
const { fetchUser } = require("./src/users");

console.log(greet(1));
console.log(fetchUser(2).name);
