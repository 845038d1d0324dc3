sed -i 's/APP_DIR/APP_HOME/g' run.sh lib/paths.sh
