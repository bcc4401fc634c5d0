"""Storage tests; a package so its conftest (the backend fixture) does not clash with tests/conftest.py."""
