"""Throw-away certificates for the security tests (tools/certs.py makes them)."""
from tools.certs import Pki  # noqa: F401
