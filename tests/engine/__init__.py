"""Engine-level tests in process; a package so its conftest does not clash with tests/conftest.py."""
