printf '#!/bin/sh\nset -eu\nrm -f -- ./*.tmp\n' > scripts/clean.sh
