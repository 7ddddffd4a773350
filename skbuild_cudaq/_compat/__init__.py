"""Shims over differences between the Python versions this package supports."""
