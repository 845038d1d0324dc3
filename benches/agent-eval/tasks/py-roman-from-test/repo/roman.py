def to_roman(n):
    """Roman numeral for 1 <= n <= 3999."""
    raise NotImplementedError
