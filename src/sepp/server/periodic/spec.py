"""A periodic schedule's definition: the ``[[periodic]]`` TOML
table and the admin API's ``PeriodicSchedule``, checked by one model.

``PeriodicSettings`` is the pydantic model of one ``[[periodic]]`` entry; every rule of the
issue is a validator here, so a bad cron expression, an unknown time zone, a bad ``every``
or an unknown field is refused at start (``ServerConfig``: a ``ConfigError`` naming
``periodic[i].FIELD``) and at the admin call (``DeclarePeriodic``: INVALID_ARGUMENT, reason
``PERIODIC_INVALID``, metadata ``field``) with the same words. Cron expressions are parsed
by cronsim (Debian cron semantics, DST included), never by sepp.

A definition is stored as JSON text (``to_json`` / ``from_json``), opaque to the store.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, field_validator, model_validator

__all__ = ["EVERY_MAX_SECONDS", "NAME_MAX_BYTES", "PeriodicSettings", "parse_every", "zone"]

#: Longest schedule name, bytes: ``periodic:<name>:<tick>`` must fit an idempotency key
#: (256 bytes by default) with room to spare.
NAME_MAX_BYTES = 128
#: A schedule name: letters, digits and ``._-``, first a letter or digit (it is part of an
#: idempotency key and of a URL path).
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Longest ``every``: 366 days, in seconds.
EVERY_MAX_SECONDS = 366 * 86_400
_EVERY_PART = re.compile(r"(\d+)([dhms])", re.ASCII)
#: The units of ``every`` in the order its parts must come, each at most once.
_UNIT_ORDER = "dhms"
_UNIT = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def _ordered_units() -> set[str]:
    """Every in-order selection of ``_UNIT_ORDER`` (``"d"``, ``"hm"``, ``"dhms"``, …)."""
    out = {""}
    for unit in _UNIT_ORDER:
        out |= {u + unit for u in out}
    return out - {""}


def parse_every(text: str) -> int:
    """``every`` text → whole seconds: one or more ``<number><unit>`` parts with units
    ``d`` ``h`` ``m`` ``s`` (``"15m"``, ``"1h30m"``, ``"90s"``, ``"1d"``), or a bare number of
    seconds. Digits are ASCII; each unit comes at most once, largest first (``"1m1m"`` and
    ``"30m1h"`` are refused). Raises ``ValueError`` (with the accepted forms) for anything
    else, for 0 and above ``EVERY_MAX_SECONDS``."""
    raw = text.strip().lower()
    if raw.isascii() and raw.isdigit():
        seconds = int(raw)
    else:
        parts = _EVERY_PART.findall(raw)
        units = "".join(u for _n, u in parts)
        if not parts or "".join(n + u for n, u in parts) != raw or units not in _ordered_units():
            raise ValueError(f"every {text!r} is not a duration: write e.g. \"15m\", \"1h30m\", \"90s\" or \"1d\" "
                             "(units d, h, m, s)")
        seconds = sum(int(n) * _UNIT[u] for n, u in parts)
    if not 1 <= seconds <= EVERY_MAX_SECONDS:
        raise ValueError(f"every {text!r} must be between 1 s and 366 days")
    return seconds


#: Zone-database names that are a machine's setup, not a zone (see ``zone``).
_MACHINE_ZONES = frozenset({"localtime", "posixrules"})


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``"UTC"``, ``"Europe/Berlin"``). Raises ``ValueError``
    naming it when the zone database has no such zone, or when the name is one of this
    machine's setup rather than an IANA zone (``localtime``, ``posixrules``, the ``posix/`` and
    ``right/`` trees: what they mean differs between nodes, and every node must compute the
    same ticks; attack notes F5)."""
    if name in _MACHINE_ZONES or name.startswith(("posix/", "right/")):
        raise ValueError(f"time zone {name!r} is this machine's setting, not an IANA zone (it can differ between "
                         "nodes): use an IANA name such as \"UTC\", \"Europe/Berlin\" or \"America/New_York\"")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as \"UTC\", \"Europe/Berlin\" "
                         "or \"America/New_York\"") from None


CustomValue = StrictBool | StrictInt | StrictFloat | str


class PeriodicSettings(BaseModel):
    """One schedule (a ``[[periodic]]`` table). Exactly one of ``cron`` and
    ``every``. Times are evaluated in ``timezone`` (``cron`` only: ``every`` counts absolute
    time from 1970-01-01T00:00:00Z, so ``every = "15m"`` fires at :00, :15, :30 and :45 UTC).

    Raises ``pydantic.ValidationError`` for a bad value or an unknown field; each error's
    location is the field (``cron``, ``timezone``, ``every``, …)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: The schedule's name, unique on the server; part of each job's idempotency key.
    name: str = Field(min_length=1)
    #: A cron expression (5 fields, or 6 with seconds first), Debian cron semantics (cronsim).
    cron: str = ""
    #: Or a fixed interval: ``"15m"``, ``"1h30m"``, ``"90s"``, ``"1d"``.
    every: str = ""
    #: IANA time zone the cron expression is read in.
    timezone: str = "UTC"
    #: The queue each job goes to, and its job type.
    queue: str = Field(min_length=1)
    job_type: str = Field(min_length=1)
    #: The job's payload (text) and its encoding label.
    payload: str = ""
    encoding: str = "application/json"
    #: The job's custom map.
    custom: dict[str, CustomValue] = Field(default_factory=dict)
    #: Optional job priority (0–9) and max_attempts; unset = the queue's defaults.
    priority: int | None = Field(default=None, ge=0, le=9)
    max_attempts: int | None = Field(default=None, ge=1)
    #: After downtime: "latest" (one job for the missed ticks) or "none".
    catch_up: Literal["latest", "none"] = "latest"

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if len(value.encode()) > NAME_MAX_BYTES or not _NAME.match(value):
            raise ValueError(f"name {value!r} must be 1 to {NAME_MAX_BYTES} characters of letters, digits, '.', '_' "
                             "and '-', starting with a letter or digit")
        return value

    @field_validator("custom", mode="before")
    @classmethod
    def _finite_custom(cls, value: Any) -> Any:
        # Before the union's own check, whose error for a NaN named its first member
        # ("custom.k.bool: Input should be a valid boolean"; attack notes F4).
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, float) and not math.isfinite(item):
                    raise ValueError(f"custom[{key!r}] = {item} is not a finite number (NaN and infinities are "
                                     "refused, as in a job's custom map)")
        return value

    @field_validator("custom")
    @classmethod
    def _check_custom(cls, value: dict[str, CustomValue]) -> dict[str, CustomValue]:
        for key, item in value.items():
            if isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**63:
                raise ValueError(f"custom[{key!r}] = {item} does not fit in int64")
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        zone(value)
        return value

    @field_validator("every")
    @classmethod
    def _check_every(cls, value: str) -> str:
        if value:
            parse_every(value)
        return value

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, value: str) -> str:
        if not value:
            return value
        try:
            it = CronSim(value, datetime(2000, 1, 1, tzinfo=UTC))
        except CronSimError as exc:
            raise ValueError(f"bad cron expression {value!r}: {exc} (5 fields: minute hour day-of-month month "
                             "day-of-week, e.g. \"0 3 * * *\")") from None
        try:
            next(it)
        except StopIteration:
            raise ValueError(f"cron expression {value!r} never fires") from None
        return value

    @model_validator(mode="after")
    def _one_timing(self) -> PeriodicSettings:
        if bool(self.cron) == bool(self.every):
            raise ValueError("set exactly one of cron (e.g. \"0 3 * * *\") and every (e.g. \"15m\")")
        return self

    @property
    def every_seconds(self) -> int:
        """``every`` in seconds (0 for a cron schedule)."""
        return parse_every(self.every) if self.every else 0

    def describe(self) -> str:
        """The timing in a few words: ``cron 0 3 * * * (Europe/Berlin)`` or ``every 15m``."""
        return f"cron {self.cron} ({self.timezone})" if self.cron else f"every {self.every}"

    def to_json(self) -> str:
        """The definition as the store keeps it (JSON text, keys sorted)."""
        return json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PeriodicSettings:
        """A stored definition read back. Raises ``ValueError`` (``ValidationError``) when it
        no longer validates (e.g. a zone removed from the zone database)."""
        data: Any = json.loads(text)
        return cls.model_validate(data)
