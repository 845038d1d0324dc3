set -eu
f=scripts/clean.sh
[ -f $f ] || { echo "no $f"; exit 1; }
[ "$(sed -n 1p $f)" = "#!/bin/sh" ] || { echo "line 1 of $f is not #!/bin/sh"; exit 1; }
[ "$(sed -n 2p $f | tr -d ' ')" = "set-eu" ] || { echo "line 2 of $f is not set -eu"; exit 1; }
tmp=$(mktemp -d); echo 1 > "$tmp/x.tmp"; echo 2 > "$tmp/y.tmp"; echo 3 > "$tmp/z.txt"
out=$(cd "$tmp" && sh "$OLDPWD/$f")
[ ! -e "$tmp/x.tmp" ] && [ ! -e "$tmp/y.tmp" ] && [ -e "$tmp/z.txt" ] || { echo "wrong files removed"; ls "$tmp"; exit 1; }
[ -z "$out" ] || { echo "clean.sh printed: $out"; exit 1; }
rm -rf "$tmp"
