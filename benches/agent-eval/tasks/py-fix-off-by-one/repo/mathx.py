def total_upto(n):
    """Returns 1 + 2 + ... + n (0 for n <= 0)."""
    total = 0
    for i in range(1, n):
        total += i
    return total
