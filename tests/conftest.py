"""Markers: `slow` (seconds, not milliseconds) and `browser` (drives a real headless Chromium)."""


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: takes seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "browser: drives a real headless Chromium (/usr/bin/chromium) via Playwright")
