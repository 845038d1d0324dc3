cat > tags.py <<'PY'
def add_tag(tag, tags=None):
    """Returns `tags` (a new list when not given) with `tag` appended."""
    if tags is None:
        tags = []
    tags.append(tag)
    return tags
PY
