set -eu
tmp=$(mktemp -d); printf 'abc' > "$tmp/a b.txt"; printf 'hello!' > "$tmp/c.txt"
out=$(cd "$tmp" && sh "$OLDPWD/sizes.sh" "a b.txt" c.txt)
rm -rf "$tmp"
expected=$(printf 'a b.txt 3\nc.txt 6')
[ "$out" = "$expected" ] || { echo "sizes.sh printed:"; echo "$out"; exit 1; }
