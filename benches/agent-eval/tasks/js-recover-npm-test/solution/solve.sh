sed -i 's#node test/run-tests.js#node test/run.js#' package.json
