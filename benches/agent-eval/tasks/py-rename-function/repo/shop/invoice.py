from shop.pricing import calc_total


def invoice_line(items):
    return f"total: {calc_total(items)}"
