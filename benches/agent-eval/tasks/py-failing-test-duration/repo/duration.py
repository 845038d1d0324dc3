"""Durations written like "1h30m" or "45s"."""
