#!/bin/sh
set -eu
APP_DIR=${APP_DIR:-$(pwd)}
export APP_DIR
. ./lib/paths.sh
echo "data in $(data_dir)"
