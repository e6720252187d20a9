"""The transaction coordinator's settings, read from the broker config under
Kafka's names."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TxnConfig:
    """The transaction coordinator's settings (transaction.* keys)."""
    max_timeout_ms: int = 900000                          # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604800000       # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10000   # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3600000  # transaction.remove.expired.transaction.cleanup.interval.ms
    num_partitions: int = 50                              # transaction.state.log.num.partitions
    partition_verification: bool = True                  # transaction.partition.verification.enable
    # a marker write that failed (not a refusal) is tried again after this long
    marker_retry_backoff_ms: int = 100

    @classmethod
    def from_broker_config(cls, config) -> "TxnConfig":
        def get(name, default):
            try:
                value = config.get(name)
            except KeyError:
                return default
            if value is None:
                return default
            if isinstance(default, bool):
                return value if isinstance(value, bool) else str(value).lower() == "true"
            return int(value)

        return cls(
            max_timeout_ms=get("transaction.max.timeout.ms", cls.max_timeout_ms),
            transactional_id_expiration_ms=get("transactional.id.expiration.ms",
                                               cls.transactional_id_expiration_ms),
            abort_timed_out_interval_ms=get("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                            cls.abort_timed_out_interval_ms),
            remove_expired_interval_ms=get("transaction.remove.expired.transaction.cleanup.interval.ms",
                                           cls.remove_expired_interval_ms),
            num_partitions=get("transaction.state.log.num.partitions", cls.num_partitions),
            partition_verification=get("transaction.partition.verification.enable", cls.partition_verification),
        )
