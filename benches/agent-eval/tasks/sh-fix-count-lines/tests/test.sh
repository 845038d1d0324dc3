set -eu
printf 'a b c\nd\n' > /tmp/eval-count-$$.txt
got=$(sh count.sh /tmp/eval-count-$$.txt); rm -f /tmp/eval-count-$$.txt
[ "$got" = 2 ] || { echo "count.sh printed '$got' for a 2-line file"; exit 1; }
[ "$(sh count.sh sample.txt)" = 3 ]
