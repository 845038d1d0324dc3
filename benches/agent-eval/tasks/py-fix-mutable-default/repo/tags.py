def add_tag(tag, tags=[]):
    """Returns `tags` (a new list when not given) with `tag` appended."""
    tags.append(tag)
    return tags
