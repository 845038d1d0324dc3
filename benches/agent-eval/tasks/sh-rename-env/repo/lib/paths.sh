# Paths under the application directory ($APP_DIR).
data_dir() {
    echo "$APP_DIR/data"
}
