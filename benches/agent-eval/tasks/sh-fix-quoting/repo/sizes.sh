#!/bin/sh
# Usage: sizes.sh FILE... ; prints "NAME SIZE" for each file.
for f in $*; do
    echo "$f $(wc -c < $f | tr -d ' ')"
done
