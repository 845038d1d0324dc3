#!/bin/sh
# Writes out/report.txt: the number of entries in data.txt. The out/ directory is not in git.
set -e
n=$(grep -c . data.txt)
echo "entries: $n" > out/report.txt
echo "wrote out/report.txt"
