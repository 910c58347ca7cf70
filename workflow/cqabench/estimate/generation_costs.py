"""Cost of the generation jobs: prompts and tokens of each cell, one engine session over them.

A cell's work (`cell_work`): its prompts (questions, or an open-book dialogue's calls), their
tokens (template, question and documents over the measured characters per token) and the answer
tokens (`answer_tokens`: measured per template on a finished run's stop strings, else
max_new_tokens). An engine session (`_engine`): start, prefill at the prefill rate (the prefix
cache serving the template where vLLM has it), decode in rounds of the engine's concurrency
(`_concurrency`: for vLLM on a GPU, the sequences the KV cache holds, from the model's config and
the card's memory) at the decode step time; an API model costs requests in flight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cqabench.generation.cell import Cell

if TYPE_CHECKING:
    from cqabench.estimate.model import Cost

MB = 1e6


class GenerationCosts:
    """The generation rules' cost functions, mixed into `model.JobCosts` (its plan, rates, sizes
    and `_r` rate lookup)."""

    plan: Any
    rates: Any
    sizes: Any
    gpu_class: str
    _templates: dict[str, int]
    _place: Any  # model.JobCosts._place: device class and GPUs from JobCosts.on_gpu
    _r: Callable[..., float]  # model.JobCosts._r: a rate by (cost, family, name, model keys, device)
    _queries: Callable[[str, str], int]  # model.JobCosts._queries: the questions a split selects
    _in_batch: Callable[[Mapping[str, Any]], bool]  # model.JobCosts._in_batch: a batch LLM's grid cell

    def _template_chars(self, dataset: str, prompt: str, setting: str) -> int:
        path = self.plan.template_file(dataset, prompt, setting)
        if path not in self._templates:
            file = self.plan.env.root / path
            self._templates[path] = len(file.read_text(encoding="utf-8")) if file.is_file() else 0
        return self._templates[path]

    def _sampling(self, llm: str) -> dict[str, Any]:
        return {**(self.plan.generation.get("sampling") or {}), **(self.plan.llms[llm].get("sampling") or {})}

    def cell_work(self, w: Any) -> dict[str, float]:
        """Prompts, prompt tokens (all, and those the prefix cache cannot serve) and output tokens
        (`answer_tokens` a prompt: measured on stop strings, or max_new_tokens) of one cell (a Cell,
        or a job's wildcards)."""
        cell = Cell.from_wildcards(w)
        ds, sp, llm, setting, k = cell.dataset, cell.split, cell.llm, cell.setting, cell.k
        n = self._queries(ds, sp)
        cap = self.plan.max_questions_of(ds)
        if cap is not None:
            n = min(n, int(cap))
        cpt = self.rates.value("text", "data", "any", "chars_per_token")
        cut = self.plan.generation.get("max_doc_chars")
        doc = lambda chars: min(chars, cut + 40) if cut else chars  # noqa: E731  (title and numbering)
        template = self._template_chars(ds, cell.prompt, setting)
        question = self.sizes.stat(ds, sp, "question_chars")
        context = 0.0
        if setting == "rag":
            context = k * doc(self.sizes.corpus_doc_chars(self.plan.corpus_of(ds)))
        elif setting == "oracle":
            gold = self.sizes.stat(ds, sp, "gold_per_question") + self.plan.distractors_of(ds, setting)
            context = gold * doc(self.sizes.stat(ds, sp, "doc_chars"))
        max_new = int(self._sampling(llm).get("max_new_tokens", 128))
        prompt_tokens = (template + question + context) / cpt
        shared = template / cpt
        if setting == "open-book":  # a dialogue of max_steps calls, each adding an observation and a turn
            ob = self.plan.open_book_settings(cell)
            steps = int(ob["max_steps"])
            turn_new = int(ob["max_new_tokens"] or max_new)
            grow = ob["max_tool_chars"] / cpt + turn_new
            per_call = [min(prompt_tokens + t * grow, ob["max_total_tokens"]) for t in range(steps)]
            calls = n * steps
            total = n * sum(per_call)
            uncached = n * (prompt_tokens - shared + (steps - 1) * grow) + shared
            return {
                "prompts": calls,
                "questions": n,
                "prompt tokens": total,
                "uncached prompt tokens": uncached,
                "output tokens": calls * turn_new,
                "max new tokens": turn_new,
            }
        answer = self.answer_tokens(cell.prompt, max_new)
        return {
            "prompts": n,
            "questions": n,
            "prompt tokens": n * prompt_tokens,
            "uncached prompt tokens": n * (prompt_tokens - shared) + shared if n else 0.0,
            "output tokens": n * answer,
            "max new tokens": answer,
        }

    def answer_tokens(self, prompt: str, max_new: int) -> float:
        """Output tokens of one answer of a template: between the mean of the answers that ended on
        a stop string (fast end) and share x max_new + (1 - share) x that mean, share being the
        answers cut at max_new_tokens (slow end), both measured on a finished run
        (benchmarks/output_lengths.py: rates.output.data.<template>); max_new_tokens where the
        template was never measured."""
        stop = self.rates.find("output", "data", prompt, "stop_tokens")
        share = self.rates.find("output", "data", prompt, "length_share")
        if stop is None or share is None:
            return float(max_new)
        self.rates.used[stop.key], self.rates.used[share.key] = stop, share
        fast = min(stop.value, max_new)
        slow = share.value * max_new + (1 - share.value) * fast
        return {"fast": fast, "slow": slow}.get(self.rates.bound, (fast + slow) / 2)

    def output_rate_keys(self, prompt: str) -> set[str]:
        """The measured answer-length rates a cell of `prompt` rests on (none: max_new_tokens)."""
        found = [self.rates.find("output", "data", prompt, n) for n in ("stop_tokens", "length_share")]
        return {r.key for r in found if r is not None}

    def _engine(self, c: Cost, llm: str, work: list[dict[str, float]]) -> None:
        """One engine session over the cells' prompts: start, prefill, decode (in rounds of the
        engine's concurrency, each an answer's tokens long)."""
        spec = self.plan.llms[llm]
        backend = spec["backend"]
        c.model = llm
        keys = (llm, backend)
        for name in ("prompts", "prompt tokens", "uncached prompt tokens", "output tokens"):
            c.items[name] = sum(x[name] for x in work)
        if backend == "openai":
            in_flight = int(spec.get("max_concurrency") or 1)
            per_request = self._r(c, "llm", "request_s", keys) + sum(x["output tokens"] for x in work) / max(
                c.items["prompts"], 1
            ) / self._r(c, "llm", "output_tok_s", keys)
            c.wall_s = (
                self._r(c, "llm", "engine_start_s", keys) + math.ceil(c.items["prompts"] / in_flight) * per_request
            )
            c.cpu_s = c.wall_s * 0.05
            c.peak_mb = self._r(c, "llm", "peak_mb", keys)
            return
        caching = backend == "vllm" and bool(spec.get("enable_prefix_caching", c.device != "cpu"))
        prefill_tokens = c.items["uncached prompt tokens"] if caching else c.items["prompt tokens"]
        concurrency = self._concurrency(c, llm, keys, work)
        c.items["concurrency"] = concurrency
        rounds = sum(math.ceil(x["prompts"] / concurrency) * x["max new tokens"] for x in work)
        c.wall_s = (
            self._r(c, "llm", "engine_start_s", keys)
            + prefill_tokens / self._r(c, "llm", "prefill_tok_s", keys)
            + rounds * self._r(c, "llm", "decode_step_s", keys)
        )
        c.cpu_s = c.wall_s  # a GPU engine: one core feeds the card
        if c.device == "cpu":  # the engine's CPU seconds, measured as such (a loaded machine changes wall time only)
            cpu_keys = next((k for k in keys if self.rates.find("llm", "cpu", k, "engine_start_cpu_s")), None)
            if cpu_keys is None:
                c.cpu_s = c.wall_s * c.threads
            else:
                c.cpu_s = (
                    self._r(c, "llm", "engine_start_cpu_s", cpu_keys)
                    + prefill_tokens * self._r(c, "llm", "prefill_cpu_s_per_token", cpu_keys)
                    + rounds * self._r(c, "llm", "decode_cpu_s_per_step", cpu_keys)
                )
        c.peak_mb = self._r(c, "llm", "peak_mb", keys)

    def _concurrency(self, c: Cost, llm: str, keys: tuple[str, str], work: list[dict[str, float]]) -> float:
        """Sequences decoded at once. vLLM on a GPU: the KV cache left beside the weights, (GPU
        memory x gpu_memory_utilization - weights - reserve), over a sequence's KV bytes, 2 (K, V)
        x layers x KV heads x head size x 2 B (float16) x its tokens (prompt + answer), at most
        max_num_seqs: from the model's config (rates.llm_arch) and the card's memory. Else the
        engine's measured or assumed `concurrency` rate."""
        spec = self.plan.llms[llm]
        if spec["backend"] != "vllm" or c.device == "cpu":
            return self._r(c, "llm", "concurrency", keys)
        source = str(spec.get("source"))
        arch = lambda name: self._r(c, "llm_arch", name, source, device="data")  # noqa: E731
        kv_per_token = 2 * arch("layers") * arch("kv_heads") * arch("head_dim") * 2
        share = float(
            spec.get("gpu_memory_utilization") or self._r(c, "engine", "gpu_memory_utilization", "vllm", device="data")
        )
        free_gb = self._r(c, "gpu", "memory_gb") * share - arch("weights_gb") - self._r(c, "llm", "reserve_gb", keys)
        prompts = sum(x["prompts"] for x in work)
        seq_tokens = (sum(x["prompt tokens"] + x["output tokens"] for x in work) / prompts) if prompts else 1.0
        most = float(spec.get("max_num_seqs") or self._r(c, "engine", "max_num_seqs", "vllm", device="data"))
        return max(1.0, min(most, math.floor(max(free_gb, 0.0) * 1e9 / (kv_per_token * seq_tokens))))

    def _generate(self, c: Cost, w: dict[str, str]) -> None:
        llm = w["llm"]
        work = self.cell_work(w)
        c.items.update({"questions": work["questions"]})
        c.disk_mb = work["prompts"] * 2000 / MB  # predictions + the item cache, ~2 kB an item
        if self._in_batch(w):  # a grid cell of a batch LLM: answers come from the batch's item cache
            c.model = llm
            c.items["prompts"] = work["prompts"]
            c.wall_s = c.cpu_s = self._r(c, "light", "fixed_s", "generate_cached")
            c.peak_mb = self._r(c, "light", "peak_mb", "generate_cached")
            return
        self._place(c, w)
        c.threads = int(self.plan.threads)
        c.rates |= self.output_rate_keys(w["prompt"])
        self._engine(c, llm, [work])

    def _generate_batch(self, c: Cost, w: dict[str, str], shares: int = 1) -> None:
        llm = w["llm"]
        cells = self.plan.batch_cells(llm)
        # a share (generation.batch_jobs) holds 1/N of every cell's questions; an answer's length stays
        work = [{k: (v if k == "max new tokens" else v / shares) for k, v in self.cell_work(x).items()} for x in cells]
        for x in cells:
            c.rates |= self.output_rate_keys(x.prompt)
        self._place(c, w)
        c.threads = int(self.plan.threads)
        self._engine(c, llm, work)
        c.items["cells"] = len(cells)
        c.disk_mb = c.items["prompts"] * 2000 / MB

    def _generate_batch_share(self, c: Cost, w: dict[str, str]) -> None:
        """One of generation.batch_jobs shares of an LLM's batch: its own engine start."""
        self._generate_batch(c, w, self.plan.batch_jobs_of(w["llm"]))
