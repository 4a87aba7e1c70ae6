"""A user's test suite (copied to a temporary directory as conftest.py and test_shop.py)."""
