"""The estimate as a range, and what API models cost in money.

Every assumed rate has a low and a high value (benchmarks/rates.yaml; a guess without them is
spread GUESS_SPREAD-fold, a measured rate not at all). The estimate is computed three times over
the same jobs and item counts: at the rates' values (what the rules ask for), with every rate at
its faster bound (`fast`) and at its slower one (`slow`); GPU-hours and makespan are reported as
fast-to-slow. The cost of every job is monotone in each rate, so the true figure under the stated
assumptions lies in that range.

Money: the tokens an API model reads and writes (prompt and output tokens of its jobs) at a price
per million tokens that the user gives, in the config (`estimate.prices.<name>: {input, output}`)
or on the command line (`--price NAME=INPUT,OUTPUT`); no price is built in (they
change, and differ by account).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.estimate.model import Cost, JobCosts
from cqabench.estimate.schedule import Makespan, makespan


@dataclass
class End:
    """One end of the range: the jobs' costs with every rate at that bound, and their makespan."""

    bound: str
    costs: list[Cost]
    span: Makespan

    @property
    def gpu_h(self) -> float:
        return sum(c.gpu_s for c in self.costs) / 3600

    @property
    def cpu_h(self) -> float:
        return sum(c.cpu_s for c in self.costs) / 3600


def at_end(costs: JobCosts, bound: str, gpus: int, cores: int) -> End:
    """The same jobs and item counts costed with every rate at `bound` (fast or slow)."""
    other = JobCosts(
        costs.plan, costs.rates.at(bound), costs.sizes, costs.gpu_class, strict=costs.strict, jobs=costs.jobs
    )
    ends = other.all()
    for c in ends:
        costs.rates.used.update({k: other.rates.used[k] for k in c.rates if k in other.rates.used})
    return End(bound, ends, makespan(costs.jobs, ends, gpus, cores))


@dataclass(frozen=True)
class Money:
    """An API model's tokens over the range (value, fast, slow ends) and, with a price, dollars."""

    llm: str
    input_tokens: float
    output_tokens: dict[str, float]  # bound -> output tokens
    price: tuple[float, float] | None  # USD per million (input, output) tokens
    price_source: str

    def usd(self, bound: str) -> float | None:
        if self.price is None:
            return None
        return (self.input_tokens * self.price[0] + self.output_tokens[bound] * self.price[1]) / 1e6

    def line(self) -> str:
        out = (
            f"{self.llm}: {self.input_tokens / 1e6:,.1f}M input tokens, "
            f"{self.output_tokens['fast'] / 1e6:,.1f}M to {self.output_tokens['slow'] / 1e6:,.1f}M output tokens"
        )
        if self.price is None:
            return out + (
                f"; no price given (set estimate.prices.{self.llm}: {{input: USD, output: USD}} "
                f"or --price {self.llm}=INPUT,OUTPUT, USD per million tokens)"
            )
        return out + (
            f"; at {self.price[0]:g} / {self.price[1]:g} USD per million input / output tokens "
            f"({self.price_source}): {self.usd('fast'):,.0f} to {self.usd('slow'):,.0f} USD"
        )


def parse_prices(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    """`NAME=INPUT,OUTPUT` (USD per million tokens) as {name: (input, output)}."""
    out = {}
    for item in items:
        name, _, pair = item.partition("=")
        try:
            inp, outp = (float(x) for x in pair.split(","))
        except ValueError:
            raise ConfigError(
                f"--price {item!r}: expected NAME=INPUT,OUTPUT in USD per million tokens, e.g. gpt-3.5-turbo=0.5,1.5"
            ) from None
        if not name or inp < 0 or outp < 0:
            raise ConfigError(f"--price {item!r}: expected NAME=INPUT,OUTPUT with a model name and prices >= 0")
        out[name] = (inp, outp)
    return out


def _config_price(plan: Any, llm: str) -> tuple[float, float] | None:
    spec = ((plan.config.get("estimate") or {}).get("prices") or {}).get(llm)
    if spec is None:
        return None
    return float(spec["input"]), float(spec["output"])


def money(plan: Any, by_bound: Mapping[str, Sequence[Cost]], prices: Mapping[str, tuple[float, float]]) -> list[Money]:
    """Per API model: its jobs' prompt tokens and, per bound, output tokens; the price given on the
    command line, else in the config, else none."""
    unknown = sorted(set(prices) - set(plan.llms))
    if unknown:
        raise ConfigError(f"--price: {', '.join(unknown)} is not a model under llms: in the config")
    unknown = sorted(set((plan.config.get("estimate") or {}).get("prices") or {}) - set(plan.llms))
    if unknown:
        raise ConfigError(f"estimate.prices: {', '.join(unknown)} is not a model under llms: in the config")
    out = []
    for llm in sorted({c.model for c in by_bound["value"] if c.device == "api"}):
        tokens = {b: [c for c in cs if c.device == "api" and c.model == llm] for b, cs in by_bound.items()}
        price, source = (
            (prices[llm], "--price") if llm in prices else (_config_price(plan, llm), f"estimate.prices.{llm}")
        )
        out.append(
            Money(
                llm,
                sum(c.items.get("prompt tokens", 0.0) for c in tokens["value"]),
                {b: sum(c.items.get("output tokens", 0.0) for c in cs) for b, cs in tokens.items()},
                price,
                source if price else "",
            )
        )
    return out
