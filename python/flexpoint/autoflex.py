"""Autoflex configuration and write traces as Python dataclasses."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Union

import numpy as np

from ._check import c_bool, c_int, c_str
from ._lib import lib
from ._structs import AutoflexConfigC, TraceRecordC
from .errors import InvalidArgumentError, check

__all__ = ["AutoflexConfig", "TraceRecord", "PRESETS", "autoflex_preset", "trace_to_arrays"]

#: Named presets of fx_autoflex_preset (flexpoint.h).
PRESETS = ("published", "fixed", "truemax", "exact_init", "robust")

_INIT = {"probe": 0, "exact": 1}
_STAT = {"saturated_max": 0, "true_max": 1}
_OVERFLOW = {"keep": 0, "recompute": 1}


def _mode(value: Union[str, int], table: Dict[str, int], field: str) -> int:
    if isinstance(value, str):
        if value not in table:
            raise InvalidArgumentError(
                f"AutoflexConfig.{field}={value!r}: expected one of {sorted(table)}", -1)
        return table[value]
    return c_int(value, f"AutoflexConfig.{field}")


def _name(value: int, table: Dict[str, int]) -> Union[str, int]:
    for k, v in table.items():
        if v == value:
            return k
    return value


@dataclass
class AutoflexConfig:
    """Mirror of fx_autoflex_config (see docs/autoflex.md). Modes are names:
    init_mode "probe" | "exact", stat_mode "saturated_max" | "true_max",
    overflow_mode "keep" | "recompute". The library validates the values when the
    configuration is applied to a tensor (InvalidArgumentError out of range); :meth:`to_c`
    first refuses what cannot cross into C unchanged: ArgumentTypeError for a field of the
    wrong type (a float history_len, a str beta, a non-bool managed), ArgumentRangeError for an
    integer beyond the C int range (history_len=2**32+16 is not wrapped to 16),
    InvalidArgumentError for an unknown mode name."""
    managed: bool = True
    history_len: int = 16
    beta: float = 3.0
    gamma: float = 100.0
    alpha: float = 1.0
    init_mode: Union[str, int] = "probe"
    stat_mode: Union[str, int] = "saturated_max"
    overflow_mode: Union[str, int] = "keep"
    init_exp: int = -8
    probe_tries: int = 10

    def to_c(self) -> AutoflexConfigC:
        """The C struct for this configuration (every field checked against its C type; see
        the class docstring for the exceptions)."""
        # AutoflexConfigC checks the int and double fields as they are assigned
        return AutoflexConfigC(
            managed=c_bool(self.managed, "AutoflexConfig.managed"),
            history_len=self.history_len, beta=self.beta, gamma=self.gamma, alpha=self.alpha,
            init_mode=_mode(self.init_mode, _INIT, "init_mode"),
            stat_mode=_mode(self.stat_mode, _STAT, "stat_mode"),
            overflow_mode=_mode(self.overflow_mode, _OVERFLOW, "overflow_mode"),
            init_exp=self.init_exp, probe_tries=self.probe_tries)

    @classmethod
    def from_c(cls, c: AutoflexConfigC) -> "AutoflexConfig":
        """Configuration from the C struct."""
        return cls(managed=bool(c.managed), history_len=c.history_len, beta=c.beta,
                   gamma=c.gamma, alpha=c.alpha, init_mode=_name(c.init_mode, _INIT),
                   stat_mode=_name(c.stat_mode, _STAT),
                   overflow_mode=_name(c.overflow_mode, _OVERFLOW), init_exp=c.init_exp,
                   probe_tries=c.probe_tries)


def autoflex_preset(name: str) -> AutoflexConfig:
    """The configuration of a named preset ("published", "fixed", "truemax", "exact_init",
    "robust"); UnknownNameError for another name, ArgumentTypeError for a non-str,
    InvalidArgumentError for a name containing NUL."""
    c = AutoflexConfigC()
    check(lib().fx_autoflex_preset(c_str(name, "preset"), c), "fx_autoflex_preset")
    return AutoflexConfig.from_c(c)


@dataclass(frozen=True)
class TraceRecord:
    """One write of a traced shared-exponent tensor (fx_trace_record)."""
    write: int
    exp: int
    clamped: bool
    overflow: bool
    recomputed: bool
    saturated: int
    nonfinite: int
    underflow: int
    true_max: float
    stored_max: float

    @classmethod
    def from_c(cls, r: TraceRecordC) -> "TraceRecord":
        return cls(write=r.write, exp=r.exp, clamped=bool(r.clamped), overflow=bool(r.overflow),
                   recomputed=bool(r.recomputed), saturated=r.saturated, nonfinite=r.nonfinite,
                   underflow=r.underflow, true_max=r.true_max, stored_max=r.stored_max)


def trace_to_arrays(records: List[TraceRecord]) -> Dict[str, np.ndarray]:
    """Column arrays of a trace: {"write": int64[n], "exp": int64[n], "overflow": bool[n], ...}."""
    out: Dict[str, np.ndarray] = {}
    for f in dataclasses.fields(TraceRecord):
        vals = [getattr(r, f.name) for r in records]
        if f.type in ("bool", bool):
            out[f.name] = np.array(vals, dtype=bool)
        elif f.type in ("float", float):
            out[f.name] = np.array(vals, dtype=np.float64)
        else:
            out[f.name] = np.array(vals, dtype=np.int64)
    return out
