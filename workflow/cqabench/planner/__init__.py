"""Planning: which jobs a config asks for, checked, and every path a rule reads or writes.

The package is split the way the workflow is: one module per stage (`data`, `retrieval`,
`generation`, `evaluation`, `report`, plus `needed_models` for hub checkpoints), each building on the
stages before it, and `plan` composing them into the `Plan` that `workflow/rules/common.smk`
builds and the rules read as `PLAN`. The names below are re-exported so that `from cqabench.planner import Plan`
and the rules' helpers keep one short import.
"""

from cqabench.generation.cell import Cell
from cqabench.planner.environment import Environment
from cqabench.planner.generation import GEN_ENVS, GGUF_PREFIXES, OPEN_BOOK_LIMITS, PER_CELL_SETTINGS
from cqabench.planner.plan import Plan
from cqabench.planner.retrieval import SUFFIX_KIND
from cqabench.planner.rule_text import NEVER, as_arg, as_json, names_pattern, one_of

__all__ = [
    "GEN_ENVS", "GGUF_PREFIXES", "NEVER", "OPEN_BOOK_LIMITS", "PER_CELL_SETTINGS", "SUFFIX_KIND",
    "Cell", "Environment", "Plan", "as_arg", "as_json", "names_pattern", "one_of",
]  # fmt: skip
