def deep_merge(base, override):
    """Returns a new dict: `base` with `override` merged in. Where both hold a dict under the same
    key, those dicts are merged the same way; otherwise the value from `override` wins. Neither
    argument is modified.

    >>> deep_merge({"a": 1, "b": {"x": 1, "y": 2}}, {"b": {"y": 3}, "c": 4})
    {'a': 1, 'b': {'x': 1, 'y': 3}, 'c': 4}
    """
    raise NotImplementedError
