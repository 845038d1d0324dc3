sed -i 's/fetchUser/loadUser/g' src/users.js src/greet.js main.js
