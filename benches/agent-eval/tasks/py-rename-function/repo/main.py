from shop.invoice import invoice_line
from shop.pricing import calc_total

ITEMS = [(3, 2), (5, 1)]
print(invoice_line(ITEMS))
assert calc_total(ITEMS) == 11
