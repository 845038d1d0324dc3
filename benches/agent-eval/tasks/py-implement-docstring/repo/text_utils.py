def slugify(title):
    """Turns a title into a URL slug: lower case, runs of characters that are not letters or
    digits become one "-", and no "-" at either end.

    >>> slugify("Hello, World!")
    'hello-world'
    >>> slugify("  Rust & Python 3  ")
    'rust-python-3'
    """
    raise NotImplementedError
