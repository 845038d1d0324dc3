set -eu
[ -f out/report.txt ] || { echo "no out/report.txt"; exit 1; }
[ "$(cat out/report.txt)" = "entries: 4" ] || { echo "out/report.txt: $(cat out/report.txt)"; exit 1; }
