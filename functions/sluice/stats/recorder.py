"""Counters kept in memory and merged into the registry in batches, so a request costs a
few dict updates rather than a database write.

Nothing counted is lost without being counted as lost:

- a flush takes the pending counts out, writes each key's, and puts back (merging with what
  arrived meanwhile: sums added, maxima kept) those whose write failed, to be tried again
  at the next flush;
- flushes run when a request finds them due, when a read needs them, on the process's timer
  (`sluice.stats.timer`: an idle process publishes its last counts within `flush_every_s`),
  and at shutdown (`close`);
- what can never be written is dropped, and reported through `on_drop` (a log line and the
  `ml_inference_stats_dropped` metric, `Telemetry.stats_dropped`): a key's counts still
  refused at `close`, or refused at `give_up_flushes` flushes in a row spanning `give_up_s`
  (both: a process that flushes rarely, as in Lambda, is not taken for one refused all along);
  counts beyond `max_pending` keys held while the registry refuses; and a count that is not a
  number the registry stores (`StatsRegistry.stat_numbers`: NaN or infinite anywhere, 1e126
  and more in DynamoDB), which is never held, so that it cannot keep its key's other counts
  from being written. Such a count is dropped alone, with the members of its mean (`x_sum`,
  `x_sumsq`, `x_n`: a mean's sum is never kept without its count), at the add, and at the
  flush where a sum has grown out of range. Every count reaches the registry through this
  recorder, so this is the one place that rule is kept, for every backend.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING

from sluice.domain.objects import MIRROR
from sluice.domain.stat_numbers import FLOAT64
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant
from sluice.stats import timer
from sluice.stats.held import CALL, HELD
from sluice.stats.histogram import bucket_name

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain.stat_numbers import StatNumbers
    from sluice.registry import StatsRegistry

Key = tuple[str, str, int, str]  # tenant, deployment, revision, subject
Sample = tuple[Key, float | None]  # a key and a latency in milliseconds (an answer), or None (a failure)
Dropped = tuple[Key, float, str]  # a key, the requests (and rewards) its dropped counts held, why

LAST_REQUEST = "last_request_ms"  # a maximum: when a deployment last had a request (ms since the epoch)
MAX_PENDING = 10_000  # keys held at once (a few KB each) while the registry refuses writes
GIVE_UP_S = 900.0  # a key's counts refused at every flush this long (and at GIVE_UP_FLUSHES in a row) are dropped
GIVE_UP_FLUSHES = 10
COMPLAIN_EVERY_S = 60.0  # while writes keep failing, a warning this often (and at the first)
TOO_MANY = "too many statistics pending while the registry refused writes"
AT_CLOSE = "the registry refused the last write before the process stopped"
GAVE_UP = "the registry refused these counts at {flushes} flushes in a row, over {minutes:g} minutes"
NOT_STORED = "not a number the registry stores: {names}"
MEAN_PARTS = ("_sum", "_sumsq", "_n")  # the members of a mean (`diff_sum`, `diff_sumsq`, `diff_n`): kept or dropped together


class StatsRecorder(timer.Flushed):
    registry: StatsRegistry

    def __init__(
        self,
        registry: StatsRegistry,
        *,
        flush_every_s: float = 2.0,
        on_drop: Callable[[list[Dropped]], None] | None = None,
        max_pending: int = MAX_PENDING,
        give_up_s: float = GIVE_UP_S,
        give_up_flushes: int = GIVE_UP_FLUSHES,
        timed: bool | None = None,
    ) -> None:
        """`timed`: flushed by the process's timer thread as well (`timer.Flushed`).
        `give_up_s`, `give_up_flushes`: a key's counts refused at this many flushes in a row,
        the first this long ago, are dropped (a registry down that long, or one refusing these
        counts alone); a write that succeeds starts both afresh."""
        super().__init__(registry, flush_every_s=flush_every_s, timed=timed)
        self.on_drop = on_drop or _log_dropped
        self.max_pending = max_pending
        self.give_up_s = give_up_s
        self.give_up_flushes = give_up_flushes
        self.numbers: StatNumbers = getattr(registry, "stat_numbers", FLOAT64)
        self._sums: dict[Key, defaultdict[str, float]] = {}
        self._maxes: dict[Key, dict[str, float]] = {}
        self._lost: dict[tuple[Key, str], float] = {}
        self._refused: dict[Key, tuple[float, int]] = {}  # keys refused at every flush since: (first, monotonic; flushes)
        self._failing_since: float | None = None
        self._complained = 0.0

    # Counting ---------------------------------------------------------------------------------
    def _sums_of(self, key: Key) -> defaultdict[str, float] | None:
        """The key's pending sums (made if need be), or None when no more keys may be held.
        Called with the lock held, as every method below that touches the counts."""
        sums = self._sums.get(key)
        if sums is None:
            if key[1] == MIRROR:  # a mirror's walk: counted as its mirror, never under the placeholder
                return defaultdict(float)
            if len(self._sums) >= self.max_pending:
                return None
            sums = self._sums[key] = defaultdict(float)
            self._watched()
        return sums

    def _maxes_of(self, key: Key) -> dict[str, float] | None:
        maxes = self._maxes.get(key)
        if maxes is None:
            if len(self._maxes) >= self.max_pending:
                return None
            maxes = self._maxes[key] = {}
            self._watched()
        return maxes

    def request(
        self, key: Key, latency_ms: float, ok: bool, rows: int = 0, invalid: bool = False, steps: Sequence[Sample] = ()
    ) -> None:
        """One request: answered (`ok`, its latency) or failed; `invalid`: failed for the
        inputs it carried (`invalid_inputs`, the rollout gate `invalid_input_rate`). `steps`:
        the samples of its parts (a graph's steps) as `requests` takes them, under the same lock."""
        held = HELD.get()
        if held is not None:  # a stream's: counted once its records are answered for good (`sluice.stats.held`)
            held.append((self, CALL.get(), "request", (key, latency_ms, ok, rows, invalid, steps)))
            return
        with self._lock:
            if steps:
                self._count(steps)
            sums = self._sums_of(key)
            if sums is None:
                self._lose(key, 1, TOO_MANY)
                return
            sums["requests"] += 1
            if ok:
                sums[bucket_name(latency_ms)] += 1
                sums["latency_ms_sum"] += latency_ms  # Triton's statistics report total time
            else:
                sums["errors"] += 1
                if invalid:
                    sums["invalid_inputs"] += 1
            if rows:
                sums["rows"] += rows
            if key[3] == "deployment":  # the deployment's own key alone: one more write per flush, not one per subject
                maxes = self._maxes_of(key)
                if maxes is not None:  # later requests' times are larger: kept as a maximum
                    maxes[LAST_REQUEST] = time.time() * 1000

    def requests(self, samples: Sequence[Sample]) -> None:
        """Several `request`s at once, under one lock (a graph's steps, once per request):
        a latency in milliseconds counts an answer, None a failure."""
        held = HELD.get()
        if held is not None:
            held.append((self, CALL.get(), "requests", (samples,)))
            return
        with self._lock:
            self._count(samples)

    def _count(self, samples: Sequence[Sample]) -> None:
        pending = self._sums
        for key, latency_ms in samples:
            sums = pending.get(key) or self._sums_of(key)  # a key seen before: no call
            if sums is None:
                self._lose(key, 1, TOO_MANY)
                continue
            sums["requests"] += 1
            if latency_ms is None:
                sums["errors"] += 1
            else:
                sums[bucket_name(latency_ms)] += 1
                sums["latency_ms_sum"] += latency_ms

    def add(self, key: Key, sums: dict[str, float], maxes: dict[str, float] | None = None) -> None:
        held = HELD.get()
        if held is not None:
            held.append((self, CALL.get(), "add", (key, sums, maxes)))
            return
        with self._lock:
            self._merge(key, sums, maxes)

    def _merge(self, key: Key, sums: dict[str, float] | None, maxes: dict[str, float] | None) -> None:
        """Counts added to what is pending: sums summed, maxima kept. A count the registry
        cannot store is dropped, with the other members of its mean (`_storable`)."""
        # The usual add, whose values sum to a number within the registry's range, goes in as it is (a
        # NaN or an infinity fails the test); values that cancel out of range, and one too small for
        # the registry, are found when the flush writes the key (`_storable` again).
        below = self.numbers.below
        if sums and not -below < sum(sums.values()) < below:
            sums = self._storable(key, sums)
        if maxes and not -below < sum(maxes.values()) < below:
            maxes = self._storable(key, maxes)
        if sums:
            target = self._sums_of(key)
            if target is None:
                self._lose(key, _weight(sums), TOO_MANY)
                return
            for name, value in sums.items():
                target[name] += value
        if maxes:
            current = self._maxes_of(key)
            if current is None:
                self._lose(key, 0.0, TOO_MANY)
                return
            for name, value in maxes.items():
                current[name] = max(current.get(name, value), value)

    def _lose(self, key: Key, weight: float, reason: str) -> None:
        self._lost[(key, reason)] = self._lost.get((key, reason), 0.0) + weight

    # Flushing ---------------------------------------------------------------------------------
    def pending(self) -> bool:
        return bool(self._sums or self._maxes)

    def flush(self) -> bool:
        """Write what is pending; what the registry refuses is put back for the next flush.
        Never raises for a refused write. True when every key was written."""
        with self._flushing:
            with self._lock:
                sums, maxes = self._sums, self._maxes
                self._sums, self._maxes = {}, {}
                self._last_flush = time.monotonic()
            kept: list[tuple[Key, dict[str, float] | None, dict[str, float] | None]] = []
            error: Exception | None = None
            now, refused = time.monotonic(), self._refused
            self._refused = {}
            for key in sums.keys() | maxes.keys():
                # Sums, then maxima: a registry that writes them in two steps (DynamoDB) and
                # fails between would otherwise count the sums twice once they are put back.
                with self._lock:  # a sum may have grown out of the registry's range
                    key_sums, key_maxes = self._storable(key, sums.get(key)), self._storable(key, maxes.get(key))
                try:
                    if key_sums:
                        self._write(key, key_sums, {})
                        key_sums = None
                    if key_maxes:
                        self._write(key, {}, key_maxes)
                except Exception as exc:  # any refusal: kept, to be tried again, for a while
                    error = exc
                    since, times = refused.get(key, (now, 0))
                    times += 1
                    if times < self.give_up_flushes or now - since < self.give_up_s:
                        kept.append((key, key_sums, key_maxes))
                        self._refused[key] = (since, times)
                        continue
                    with self._lock:
                        self._lose(key, _weight(key_sums), GAVE_UP.format(flushes=times, minutes=round((now - since) / 60, 1)))
            if kept:
                with self._lock:
                    for key, key_sums, key_maxes in kept:
                        self._merge(key, key_sums, key_maxes)
            self._said(error, len(kept))
            self._report_lost()
            return error is None

    def _storable(self, key: Key, values: dict[str, float] | None) -> dict[str, float] | None:
        """`values` as the registry stores them (`self.numbers`: a magnitude too small for it
        is 0), less those it cannot store, which are dropped and reported with the other
        members of their mean (none left: None). Called with the lock held."""
        if not values:
            return None
        kept: dict[str, float] = {}
        wrong: list[str] = []
        for name, value in values.items():
            stored = self.numbers.stored(value)
            if stored is None:
                wrong.append(name)
            else:
                kept[name] = stored
        if wrong:
            means = {_mean_of(name) for name in wrong} - {None}
            dropped = {name for name in values if name in wrong or _mean_of(name) in means}
            self._lose(key, _weight({name: values[name] for name in dropped}), NOT_STORED.format(names=", ".join(sorted(wrong))))
            kept = {name: value for name, value in kept.items() if name not in dropped}
        return kept or None

    def _write(self, key: Key, sums: dict[str, float], maxes: dict[str, float]) -> None:
        tenant, deployment, revision, subject = key
        with use_tenant(tenant):  # counters kept for each tenant's own requests, written as it
            self.registry.merge_stats(tenant, deployment, revision, subject, sums, maxes)

    def _drop(self, *, refused: bool) -> None:
        if refused:  # what is held now will not be written
            for key in self._sums.keys() | self._maxes.keys():
                self._lose(key, _weight(self._sums.get(key)), AT_CLOSE)
            self._sums, self._maxes = {}, {}
            self._refused = {}

    def _dropped(self, lost: None) -> None:
        self._report_lost()

    def _said(self, error: Exception | None, kept: int) -> None:
        """A warning when writes start failing, then at most every `COMPLAIN_EVERY_S`; a line
        when they work again."""
        now = time.monotonic()
        if error is None:
            if self._failing_since is not None:
                get_logger().info("statistics written again", extra={"failing_s": round(now - self._failing_since, 1)})
                self._failing_since = None
            return
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._complained < COMPLAIN_EVERY_S:
            return
        self._complained = now
        code = getattr(error, "code", None) or type(error).__name__
        get_logger().warning(
            "statistics not written: kept to try again", extra={"keys": kept, "error": code, "cause": repr(error.__cause__ or error)}
        )

    def _report_lost(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, {}
        if lost:
            self.on_drop([(key, weight, reason) for (key, reason), weight in lost.items()])


def _weight(sums: dict[str, float] | None) -> float:
    """What a key's counts stand for: its requests, and feedback rewards (kept on their own)."""
    if not sums:
        return 0.0
    return sums.get("requests", 0.0) + sums.get("reward_n", 0.0)


def _mean_of(name: str) -> str | None:
    """The mean `name` is a member of (`diff` for `diff_sumsq`), or None."""
    for part in MEAN_PARTS:
        if name.endswith(part) and len(name) > len(part):
            return name.removesuffix(part)
    return None


def _log_dropped(dropped: list[Dropped]) -> None:
    get_logger().error(
        "statistics dropped",
        extra={"requests": sum(w for _, w, _ in dropped), "keys": [{"key": list(k), "requests": w, "reason": r} for k, w, r in dropped[:20]]},
    )
