"""GPU handlers written in Python (tests/packages/py_handlers)."""
