set -eu
[ -f test_stack.py ] || { echo "no test_stack.py"; exit 1; }
out=$(python3 -m unittest -v test_stack 2>&1) || { echo "$out"; echo "the tests fail on the real Stack"; exit 1; }
echo "$out" | grep -q '^test' || { echo "no test ran: $out"; exit 1; }
# The tests must catch a stack that is really a queue.
tmp=$(mktemp -d)
cp test_stack.py "$tmp/"
cp "$TESTS_DIR/mutant_stack.py" "$tmp/stack.py"
if (cd "$tmp" && python3 -m unittest -q test_stack >/dev/null 2>&1); then
    echo "the tests also pass on a broken (FIFO) Stack"; rm -rf "$tmp"; exit 1
fi
rm -rf "$tmp"
