cat > backup.sh <<'SH'
#!/bin/sh
# Copies every *.txt file of the current directory into backup/ (created if missing), each with
# ".bak" appended to its name, then prints the number of files copied as "backed up N files".
# Other files are left alone.
set -eu
mkdir -p backup
n=0
for f in *.txt; do
    [ -f "$f" ] || continue
    cp "$f" "backup/$f.bak"
    n=$((n + 1))
done
echo "backed up $n files"
SH
