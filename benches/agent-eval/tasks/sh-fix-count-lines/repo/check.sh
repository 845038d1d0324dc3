#!/bin/sh
got=$(sh count.sh sample.txt)
if [ "$got" = 3 ]; then echo "ok: 3 lines"; else echo "FAILED: count.sh printed '$got', expected 3"; exit 1; fi
