"""What the planner's tests plan: the shipped configs, read fresh for each test, for this checkout.

Shared by the per-stage test files (test_data_plan.py, test_retrieval_plan.py, ...) so that each
builds its plans the same way, with the project's interpreter standing in for vLLM's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from cqabench.planner import Environment, Plan

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)


def load_config(name: str = "config.yaml") -> dict[str, Any]:
    """A shipped config (config/<name>), as a fresh dict a test may edit."""
    return yaml.safe_load((ROOT / "config" / name).read_text())


def plan_of(cfg: dict[str, Any], env: Environment = ENV) -> Plan:
    return Plan(cfg, env)
