"""Engine-level tests in process (issue 9 item 5); a package so its conftest does not clash with tests/conftest.py."""
