# Two commands do everything on a fresh machine:
#   make train   -> set up .venv (once) and run the default experiment (python -m src.train)
#   make test    -> set up .venv (once) and run the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
ARGS   ?=

export HF_HUB_OFFLINE ?= 1
export PYTHONHASHSEED ?= 0

.PHONY: setup train test test-fast lint format benchmark clean-logs

setup: $(STAMP)

# Re-run the install only when the dependency files change.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt "torch==2.14.1" "torchvision==0.29.1"
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(PY) -m src.train $(ARGS)

# The README test command: lint + format check, then the whole suite (slow tests included).
test: lint
	$(PY) -m pytest -q $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(ARGS)

benchmark: $(STAMP)
	$(PY) -m benchmarks.probe

clean-logs:
	rm -rf logs
