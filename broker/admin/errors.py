"""The admin CLI's failures and their exit codes (docs/cli.md lists them)."""
from __future__ import annotations

from kproto.errors import ErrorCode

OK = 0
KAFKA_ERROR = 1      # the cluster answered with an error (named as Kafka names it)
USAGE = 2            # a bad command line (argparse's own status)
CONNECTION = 3       # no broker reachable, TLS or SASL refused, or no answer in time
UNHEALTHY = 4        # `cluster health`: the cluster answered, and is not healthy


class AdminError(Exception):
    """A command failed; `str()` is the one line printed, `exit_code` the process status."""

    def __init__(self, message: str, exit_code: int = KAFKA_ERROR):
        super().__init__(message)
        self.exit_code = exit_code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


class KafkaError(AdminError):
    """An error code in a response: the line starts with Kafka's name for it."""

    def __init__(self, code: int, what: str = "", message: str | None = None):
        self.code = code
        self.name = error_name(code)
        text = self.name
        if what:
            text += f" ({what})"
        if message:
            text += f": {message}"
        super().__init__(text, KAFKA_ERROR)


def check(code: int, what: str = "", message: str | None = None) -> None:
    """Raise KafkaError for a non-zero error code."""
    if code:
        raise KafkaError(code, what, message)
