set -eu
if grep -rn APP_DIR . --exclude-dir=.git; then echo "APP_DIR is still mentioned"; exit 1; fi
[ "$(APP_HOME=/srv/app sh run.sh)" = "data in /srv/app/data" ] || { echo "run.sh: $(APP_HOME=/srv/app sh run.sh)"; exit 1; }
[ "$(sh run.sh)" = "data in $(pwd)/data" ]
