"""The client's tests run against a real daemon. `go test -tags integration
./cmd/sandboxd -run TestPythonClient` starts one of its own, builds and
installs the wheel in a venv and runs them; by hand, point them at one:

    SANDBOXD_ADDR=/run/sandboxd/sandboxd.sock \
    SANDBOXD_TEST_TCP_ADDR=127.0.0.1:7070 SANDBOXD_TEST_TOKEN_FILE=/etc/sandboxd/token \
    SANDBOXD_TEST_NET_HOST=net.test:8080 \
    /usr/bin/python3 -m pytest clients/python/tests

The daemon must run one task at a time and queue none (--max-running 1
--max-queued 0), so that a second run is refused as busy, and allow
SANDBOXD_TEST_NET_HOST, a host of the test's that answers HTTP
(--egress-allow, --egress-host).
"""

import os

import pytest

from sandboxd import Client


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: see tests/conftest.py for how to run these tests", pytrace=False)
    return value


@pytest.fixture
def client():
    _required("SANDBOXD_ADDR")
    with Client() as c:
        yield c


@pytest.fixture
def net_host():
    return _required("SANDBOXD_TEST_NET_HOST")


@pytest.fixture
def tcp():
    return _required("SANDBOXD_TEST_TCP_ADDR"), _required("SANDBOXD_TEST_TOKEN_FILE")


def pytest_sessionstart(session):
    # Under TestPythonClient the tests must exercise the installed wheel,
    # not the source tree.
    if os.environ.get("SANDBOXD_TEST_WHEEL"):
        import sys

        import sandboxd

        if not sandboxd.__file__.startswith(sys.prefix):
            pytest.exit(f"sandboxd was imported from {sandboxd.__file__}, not the wheel installed in {sys.prefix}", returncode=1)
