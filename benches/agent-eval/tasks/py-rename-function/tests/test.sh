set -eu
if grep -rn calc_total --include='*.py' .; then echo "calc_total is still mentioned"; exit 1; fi
out=$(python3 main.py)
[ "$out" = "total: 11" ] || { echo "main.py printed: $out"; exit 1; }
python3 -c 'from shop.pricing import order_total; assert order_total([(2, 2)]) == 4'
