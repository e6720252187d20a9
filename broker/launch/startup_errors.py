"""Start-up failures as one line naming what is wrong and what to do, for
`kproto serve` to print instead of a traceback (exit code 1)."""
from __future__ import annotations


from broker.config.types import StartupError
from broker.storage.errors import LogDirLocked
from broker.storage.limits import explain_exhausted

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in leaves(e)]
    return [exc]


def explain(exc: BaseException, log_dir: str | None) -> str | None:
    """The one-line message for a start-up failure, None if it is not one
    we know (a bug: the traceback is then the useful output)."""
    for e in leaves(exc):
        if isinstance(e, StartupError):
            return str(e)
        if isinstance(e, LogDirLocked):
            return (f"log directory {log_dir} (log.dirs) is in use by another process (a kproto or Kafka "
                    "broker): stop it, or give this broker its own directory with --set log.dirs=PATH")
        if isinstance(e, OSError) and (why := explain_exhausted(e)) is not None:
            return f"cannot open the partitions of log directory {log_dir} (log.dirs): {why}"
        if isinstance(e, OSError) and e.filename is not None:
            return (f"cannot use log directory {log_dir} (log.dirs): {e.strerror or e} at {e.filename}; "
                    "choose a directory kproto can create and write with --set log.dirs=PATH")
    return None
