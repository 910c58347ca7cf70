"""benchmarks/rates.yaml: per-item costs with their provenance, read by the estimate, written by
the benchmarks.

A rate is one number with a unit, under (rule family, device class, model). Every rate says
where it comes from, in one of two ways:
- `measured`: machine, date and command (the benchmark run that produced it; `from` names the
  file or doc section holding the raw measurement);
- `assumed`: a named assumption with its published `source` (GPU throughput and other costs that
  could not be measured here), and a `note` on how the number follows from the source.
The estimate's output lists each rate it used with its kind, so a reader sees which parts of a
bill rest on measurements and which on assumptions.

Lookups fall back from the model to `any` (a family-wide rate), never from one device class to
another: a CPU measurement is not silently used for a GPU job. A missing rate is a ConfigError
naming the file and key.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner.config_files import load_file

# The checkout this package belongs to (resolved: tests and runs link workflow/ into other folders).
REPO = Path(__file__).resolve().parents[3]
RATES_FILE = REPO / "benchmarks/rates.yaml"
ANY = "any"
HEADER = """\
# Per-item costs for `cqabench estimate` (workflow/cqabench/estimate/), one versioned file.
# rates.<rule family>.<device class>.<model or any>.<name> = {value, unit, measured | assumed}.
# measured: {machine, date, command[, from]}: written by the benchmarks in benchmarks/ with
#   --write-rates (each benchmark updates only its own entries).
# assumed: {source, note}: a cost that could not be measured here (GPU throughput, the network),
#   with the published source it is taken from; the estimate marks every such rate in its output.
#   An assumption gives its spread as `low` and `high` (the source or the roofline arithmetic in
#   its note); one without them is a guess, spread GUESS_SPREAD-fold either way.
# Edit by rerunning the benchmark; an assumption is edited by hand, with its source.
"""
# An assumed rate with no stated low / high is a guess: the estimate's range takes it from
# value / GUESS_SPREAD to value x GUESS_SPREAD (a measured rate has no spread).
GUESS_SPREAD = 2.0
# Rates of which more is faster (items per second, concurrency); of every other rate (seconds per
# item, per job) less is. The fast end of the range takes each rate's faster bound.
FASTER_WHEN_HIGHER = (
    "docs_per_s",
    "pairs_per_s",
    "prefill_tok_s",
    "output_tok_s",
    "gflop_s",
    "concurrency",
    "mb_per_s",
    "memory_gb",
    "gpu_memory_utilization",
)
BOUNDS = ("value", "fast", "slow")


@dataclass(frozen=True)
class Rate:
    """One cost: value, unit, and where it comes from."""

    key: str  # family.device.model.name
    value: float
    unit: str
    kind: str  # "measured" or "assumed"
    provenance: Mapping[str, Any]
    low: float | None = None  # the spread of an assumption (None: measured, or GUESS_SPREAD)
    high: float | None = None

    @property
    def assumed(self) -> bool:
        return self.kind == "assumed"

    @property
    def spread(self) -> tuple[float, float]:
        """(low, high): stated, else a guess's GUESS_SPREAD-fold, else (value, value) when measured
        or a property of the data or a model (device class `data`: no cost, no spread)."""
        if not self.assumed or self.key.split(".")[1] == "data":
            return self.value, self.value
        if self.low is None or self.high is None:
            return self.value / GUESS_SPREAD, self.value * GUESS_SPREAD
        return self.low, self.high

    def at(self, bound: str) -> float:
        """The value at one end of the range: `fast` (the faster bound), `slow`, or `value`."""
        if bound == "value":
            return self.value
        low, high = self.spread
        faster = high if self.key.rsplit(".", 1)[-1].endswith(FASTER_WHEN_HIGHER) else low
        return faster if bound == "fast" else (low + high - faster)

    def describe(self) -> str:
        """One line: the rate, its range, its unit and where it comes from."""
        p = self.provenance
        if self.assumed:
            where = f"assumed: {p.get('source', '?')}"
            if p.get("note"):
                where += f"; {p['note']}"
        else:
            where = f"measured {p.get('date', '?')} on {p.get('machine', '?')}: {p.get('command', '?')}"
        low, high = self.spread
        span = "" if low == high else (f" [{low:g} to {high:g}" + (", a guess" if self.low is None else "") + "]")
        return f"{self.key} = {self.value:g}{span} {self.unit} ({where})"


@dataclass
class Rates:
    """The parsed rates file; `get` looks one rate up and records that it was used."""

    data: Mapping[str, Any]
    path: Path = RATES_FILE
    bound: str = "value"  # which end of each rate's range `value` returns (BOUNDS)

    def __post_init__(self) -> None:
        self.used: dict[str, Rate] = {}

    def at(self, bound: str) -> Rates:
        """The same rates read at one end of their ranges (`fast`, `slow`) or at their values."""
        if bound not in BOUNDS:
            raise ConfigError(f"rate bound {bound!r}: one of {', '.join(BOUNDS)}")
        return Rates(self.data, self.path, bound)

    @property
    def device_classes(self) -> Mapping[str, str]:
        classes = self.data.get("device_classes")
        return classes if isinstance(classes, Mapping) else {}

    def find(self, family: str, device: str, model: str, name: str) -> Rate | None:
        """The rate, or None: model first, then `any`."""
        by_device = ((self.data.get("rates") or {}).get(family) or {}).get(device) or {}
        for m in (model, ANY):
            entry = (by_device.get(m) or {}).get(name)
            if entry is not None:
                return self._rate(f"{family}.{device}.{m}.{name}", entry)
        return None

    def get(self, family: str, device: str, model: str, name: str) -> Rate:
        rate = self.find(family, device, model, name)
        if rate is None:
            raise ConfigError(
                f"{self.path}: no rate rates.{family}.{device}.{model}.{name} "
                f"(nor rates.{family}.{device}.{ANY}.{name}); rerun the benchmark that "
                "measures it with --write-rates, or add it as an assumption with its source"
            )
        self.used[rate.key] = rate
        return rate

    def value(self, family: str, device: str, model: str, name: str) -> float:
        return self.get(family, device, model, name).at(self.bound)

    def _rate(self, key: str, entry: Any) -> Rate:
        if not isinstance(entry, Mapping) or "value" not in entry:
            raise ConfigError(f"{self.path}: rates.{key} must be a mapping with value, unit and measured or assumed")
        kinds = [k for k in ("measured", "assumed") if k in entry]
        if len(kinds) != 1:
            raise ConfigError(
                f"{self.path}: rates.{key} needs exactly one of measured / assumed, has {kinds or 'none'}"
            )
        kind = kinds[0]
        prov = entry[kind] or {}
        if not isinstance(prov, Mapping):
            raise ConfigError(f"{self.path}: rates.{key}.{kind} must be a mapping, got {type(prov).__name__}")
        required = ("machine", "date", "command") if kind == "measured" else ("source",)
        missing = [k for k in required if not prov.get(k)]
        if missing:
            raise ConfigError(f"{self.path}: rates.{key}.{kind} lacks {missing}")
        raw = entry["value"]
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.path}: rates.{key}.value is not a number: {raw!r}") from None
        if isinstance(raw, bool) or not math.isfinite(value) or value < 0:
            # A cost is a finite amount >= 0: a negative one gave "-1 s" jobs and a makespan that
            # looked believable, nan or inf a bill of nan or inf hours.
            raise ConfigError(f"{self.path}: rates.{key}.value must be a finite number >= 0, got {raw!r}")
        low, high = entry.get("low"), entry.get("high")
        if (low is None) != (high is None) or (low is not None and kind != "assumed"):
            raise ConfigError(f"{self.path}: rates.{key}: low and high go together, on an assumed rate only")
        if low is not None:
            bounds = [b for b in (low, high) if isinstance(b, (int, float)) and not isinstance(b, bool)]
            if len(bounds) != 2 or not 0 <= bounds[0] <= value <= bounds[1]:
                raise ConfigError(
                    f"{self.path}: rates.{key}: need 0 <= low <= value <= high, got {low!r}, {raw!r}, {high!r}"
                )
            low, high = float(bounds[0]), float(bounds[1])
        return Rate(key, value, str(entry.get("unit", "")), kind, prov, low, high)

    def check(self) -> list[str]:
        """Every entry parsed once: the problems, each naming its key (empty when all are well formed)."""
        problems: list[str] = []

        def mapping(value: Any, key: str) -> Mapping[str, Any]:
            """`value` when it is a mapping (or empty); else a problem naming `key`, and {}."""
            if value is None or isinstance(value, Mapping):
                return value or {}
            problems.append(f"{self.path}: {key} must be a mapping, got {type(value).__name__}")
            return {}

        mapping(self.data.get("device_classes"), "device_classes")
        for family, devices in mapping(self.data.get("rates"), "rates").items():
            for device, models in mapping(devices, f"rates.{family}").items():
                if device not in self.device_classes:
                    problems.append(f"{self.path}: rates.{family}.{device}: device class not under device_classes")
                for model, names in mapping(models, f"rates.{family}.{device}").items():
                    for name, entry in mapping(names, f"rates.{family}.{device}.{model}").items():
                        try:
                            self._rate(f"{family}.{device}.{model}.{name}", entry)
                        except ConfigError as exc:
                            problems.append(str(exc))
        return problems


def load_rates(path: str | Path = RATES_FILE) -> Rates:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: the rates file is missing (benchmarks/rates.yaml in the repository)")
    data = load_file(path) or {}  # strict YAML: a syntax error or a duplicated key named by line
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path}: the rates file holds a mapping (version, device_classes, rates), got {type(data).__name__}"
        )
    rates = Rates(data, path)
    problems = rates.check()
    if problems:
        # One line (every rule's resources read this file, so `snakemake -n` shows it too).
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(f"the rates file is malformed: {problems[0]}{more}")
    return rates


def machine() -> str:
    """This machine in a few words: the CPU model, cores, memory (what a measurement ran on)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        mem = ""
    return f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def provenance(argv: list[str] | None = None, source: str | None = None) -> dict[str, str]:
    """The `measured` block of a benchmark run: this machine, today, the command that ran."""
    argv = sys.argv if argv is None else argv
    out = {
        "machine": machine(),
        "date": dt.date.today().isoformat(),
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
    }
    if source:
        out["from"] = source
    return out


def update_rates(
    path: str | Path,
    family: str,
    device: str,
    model: str,
    values: Mapping[str, tuple[float, str]],
    measured: Mapping[str, str],
) -> None:
    """Write `values` (name -> (value, unit)) as measured rates of (family, device, model),
    leaving every other entry as it is; the file is replaced atomically."""
    _write(
        path,
        family,
        device,
        model,
        {name: (value, unit, "measured", measured) for name, (value, unit) in values.items()},
    )


def update_assumed(
    path: str | Path,
    family: str,
    device: str,
    model: str,
    values: Mapping[str, tuple[float, str]],
    source: str,
    note: str | None = None,
) -> None:
    """Write `values` (name -> (value, unit)) as assumed rates of (family, device, model), with
    their published `source` (and how the number follows from it, `note`): what a benchmark
    could not measure here but states beside what it did (a GPU's throughput)."""
    assumed = {"source": source, **({"note": note} if note else {})}
    _write(
        path, family, device, model, {name: (value, unit, "assumed", assumed) for name, (value, unit) in values.items()}
    )


def _write(
    path: str | Path,
    family: str,
    device: str,
    model: str,
    entries: Mapping[str, tuple[float, str, str, Mapping[str, str]]],
) -> None:
    """name -> (value, unit, kind, provenance) into (family, device, model); the rest as it is."""
    from cqabench.common.io import write_text

    path = Path(path)
    data: dict[str, Any] = {}
    if path.is_file():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data.setdefault("version", 1)
    classes = data.setdefault("device_classes", {})
    if device not in classes:
        raise ConfigError(
            f"{path}: device class {device!r} is not under device_classes; add it with a description first"
        )
    entry = data.setdefault("rates", {}).setdefault(family, {}).setdefault(device, {}).setdefault(model, {})
    for name, (value, unit, kind, prov) in entries.items():
        entry[name] = {"value": _round(value), "unit": unit, kind: {k: _relative(v) for k, v in prov.items()}}
    write_text(HEADER + yaml.safe_dump(data, sort_keys=False, width=110, allow_unicode=True), path)


def _relative(text: str) -> str:
    """Paths of this checkout written relative to it: the file is committed, and a reader's
    checkout is elsewhere."""
    return str(text).replace(f"{REPO}/", "")


def _round(value: float) -> float | int:
    """Four significant digits: a measurement on a shared machine has no more."""
    if value == 0 or not float(value) == float(value):
        return value
    rounded = float(f"{float(value):.4g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) >= 1 else rounded
