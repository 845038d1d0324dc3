set -eu
if grep -rn fetchUser --include='*.js' .; then echo "fetchUser is still mentioned"; exit 1; fi
[ "$(node main.js)" = "$(printf 'hello, ada\nlinus')" ] || { echo "main.js printed: $(node main.js)"; exit 1; }
node -e 'const { loadUser } = require(process.cwd() + "/src/users"); if (loadUser(1).name !== "ada") process.exit(1)'
