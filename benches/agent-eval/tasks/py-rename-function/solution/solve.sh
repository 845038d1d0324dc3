sed -i 's/calc_total/order_total/g' shop/pricing.py shop/invoice.py main.py
