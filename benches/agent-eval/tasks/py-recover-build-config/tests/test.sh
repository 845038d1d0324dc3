set -eu
[ -f build/version.txt ] || { echo "no build/version.txt"; exit 1; }
[ "$(cat build/version.txt)" = "widget 2.1.0" ] || { echo "build/version.txt: $(cat build/version.txt)"; exit 1; }
rm -rf build
python3 build.py
