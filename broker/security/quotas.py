"""Client quotas as Kafka enforces them (ClientQuotaManager with the
default quota callback): producer_byte_rate, consumer_byte_rate and
request_percentage per user, client-id or both, with defaults, stored as
ClientQuotaRecord. Rates are measured over quota.window.num samples of
quota.window.size.seconds; a client over its quota gets throttle_time_ms
in the response and its connection is muted for that long (KIP-219)."""
from __future__ import annotations

import time

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
CLIENT_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
IP_KEYS = (CONNECTION_CREATION_RATE,)
DEFAULT = None   # the entity name of a default quota


class Rate:
    """Kafka's Rate over a SampledStat: the sum of the live samples divided
    by the window they cover (at least num-1 full samples and the current one's part)."""

    __slots__ = ("num", "size", "samples")

    def __init__(self, num: int, size_s: float):
        self.num, self.size = num, size_s
        self.samples: list[list[float]] = []   # [start, total]

    def record(self, value: float, now: float) -> None:
        s = self.samples
        if not s or now >= s[-1][0] + self.size:
            s.append([now, 0.0])
            if len(s) > self.num:
                del s[0]
        s[-1][1] += value

    def _purge(self, now: float) -> None:
        horizon = now - self.num * self.size
        while self.samples and self.samples[0][0] + self.size < horizon:
            del self.samples[0]

    def window_s(self, now: float) -> float:
        """Kafka's Rate.windowSize: the time since the oldest sample began, plus the full
        windows missing to make num-1 of them."""
        self._purge(now)
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed // self.size)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.size
        return elapsed

    def value(self, now: float) -> float:
        self._purge(now)
        total = sum(t for _, t in self.samples)
        return total / self.window_s(now)


class QuotaManager:
    def __init__(self, config, image):
        self.image = image
        self.num = config.get_int("quota.window.num")
        self.size = config.get_int("quota.window.size.seconds")
        self.max_throttle_ms = self.num * self.size * 1000
        self.sensors: dict[tuple, Rate] = {}
        self.mutations = MutationQuotas(config, self)

    @property
    def active(self) -> bool:
        return bool(getattr(self.image, "client_quotas", None))

    def _configured(self) -> bool:
        return self.active

    def quota(self, key: str, user: str, client_id: str):
        """(quota value, metric tags) from the most specific configured entity, or (None, None)."""
        quotas = self.image.client_quotas
        candidates = (
            (("user", user), ("client-id", client_id)), (("user", user), ("client-id", DEFAULT)),
            (("user", user),),
            (("user", DEFAULT), ("client-id", client_id)), (("user", DEFAULT), ("client-id", DEFAULT)),
            (("user", DEFAULT),),
            (("client-id", client_id),), (("client-id", DEFAULT),),
        )
        for entity in candidates:
            values = quotas.get(frozenset(entity))
            if values and key in values:
                # the sensor is shared by everyone the entity covers (Kafka's metric tags)
                tags = tuple((t, user if t == "user" else client_id) if n is DEFAULT else (t, n)
                             for t, n in entity)
                return values[key], tags
        return None, None

    def record(self, key: str, user: str, client_id: str, value: float, check: bool = True) -> int:
        """Record usage; the throttle time in ms (0 within the quota). With check=False the
        usage only counts against later requests (Kafka's recordNoThrottle)."""
        if not self._configured():
            return 0
        bound, tags = self.quota(key, user, client_id)
        if bound is None:
            return 0
        now = time.monotonic()
        sensor = self.sensors.get((key, tags))
        if sensor is None:
            sensor = self.sensors[(key, tags)] = Rate(self.num, self.size)
        sensor.record(value, now)
        if not check:
            return 0
        if key == REQUEST_PERCENTAGE:
            bound = bound / 100.0 * 1000.0     # percent of one thread -> ms of handling per second
        rate = sensor.value(now)
        if bound <= 0:
            # only a log written before values were validated holds one: as Kafka, whose
            # (rate - 0) / 0 throttle is capped, such a client is throttled to the maximum
            return self.max_throttle_ms if rate > 0 else 0
        if rate <= bound:
            return 0
        throttle = (rate - bound) / bound * sensor.window_s(now) * 1000.0
        return int(min(throttle, self.max_throttle_ms))


    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take usage back out of the current sample (Kafka's unrecordQuotaSensor: a throttled
        fetch is answered empty, so its bytes were never delivered)."""
        bound, tags = self.quota(key, user, client_id)
        sensor = self.sensors.get((key, tags)) if bound is not None else None
        if sensor is not None:
            sensor.record(-value, time.monotonic())

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most one request may record without being throttled for sure: the quota times
        (quota.window.num - 1) windows (Kafka's getMaxValueInQuotaWindow); None without a quota."""
        if not self._configured():
            return None
        bound, _tags = self.quota(key, user, client_id)
        if bound is None:
            return None
        return bound * (self.num - 1) * self.size


def user_name(principal: str) -> str:
    """The quota entity of a principal: its name (`User:alice` -> alice)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class TokenBucket:
    """KIP-599's token bucket: `burst` = rate x window.num x window.size tokens, refilled at the quota
    rate; each mutation takes tokens; a request is refused while the bucket is below zero."""

    __slots__ = ("tokens", "last")

    def __init__(self, burst: float, now: float):
        self.tokens, self.last = burst, now

    def refill(self, rate: float, burst: float, now: float) -> float:
        self.tokens = min(burst, self.tokens + (now - self.last) * rate)
        self.last = now
        return self.tokens


class MutationQuotas:
    """controller_mutation_rate: partitions created or deleted per second."""

    def __init__(self, config, quotas: QuotaManager):
        self.quotas = quotas
        self.samples = config.get_int("controller.quota.window.num")
        self.size = config.get_int("controller.quota.window.size.seconds")
        self.buckets: dict[tuple, TokenBucket] = {}

    def bucket(self, user: str, client_id: str):
        """(bucket, rate, burst) of the entity's quota; None without a quota."""
        rate, tags = self.quotas.quota(CONTROLLER_MUTATION_RATE, user, client_id)
        if rate is None:
            return None
        burst = rate * self.samples * self.size
        now = time.monotonic()
        b = self.buckets.get(tags)
        if b is None:
            b = self.buckets[tags] = TokenBucket(burst, now)
        b.refill(rate, burst, now)
        return b, rate, burst

    @staticmethod
    def throttle_ms(b: TokenBucket, rate: float) -> int:
        return int(-b.tokens / rate * 1000) if b.tokens < 0 and rate > 0 else 0
