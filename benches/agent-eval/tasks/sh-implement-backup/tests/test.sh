set -eu
rm -rf backup
out=$(sh backup.sh)
[ "$out" = "backed up 2 files" ] || { echo "backup.sh printed: $out"; exit 1; }
[ "$(cat backup/a.txt.bak)" = alpha ] && [ "$(cat backup/b.txt.bak)" = beta ]
[ ! -e backup/notes.md.bak ] && [ ! -e backup/notes.md ]
