# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the demo needs only the package; the tests also need every extra (torch, openvino+nncf, ray, ...)
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# the official scripts' own Python (tests/referee.py): what they import, apart from ours
REFEREE := .venv-referee
REFEREE_STAMP := $(REFEREE)/.installed
# Bytecode is written once, on first import: with PYTHONDONTWRITEBYTECODE set (as some
# containers do) every process would compile what it imports from source again. The tests keep
# theirs under the venv (PYTHONPYCACHEPREFIX below), never beside ../shared's sources.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test venv referee clean bench

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# the venv's own pip (23.2 with Python 3.11) installs editable pyproject packages: no upgrade
	@# --no-compile: byte-compiling every dependency took half of this install; Python compiles
	@# what is imported on first use (PYTHONDONTWRITEBYTECODE is unexported above)
	$(BIN)/pip install --quiet --no-compile -e .
	touch $(BASE_STAMP)

# the extras are for the tests: not byte-compiled at install (3/4 of the time it took), but on
# first import, once (PYTHONPYCACHEPREFIX below)
$(STAMP): $(BASE_STAMP)
	$(BIN)/pip install --quiet --no-compile -e '.[dev,report,ray,power,openvino,torch]'
	touch $(STAMP)

venv: $(STAMP)

$(REFEREE_STAMP): tests/referee-requirements.txt
	test -x $(REFEREE)/bin/python || $(PYTHON) -m venv $(REFEREE)
	$(REFEREE)/bin/pip install --quiet --no-compile -r tests/referee-requirements.txt
	touch $(REFEREE_STAMP)

referee: $(REFEREE_STAMP)

demo: $(BASE_STAMP)
	$(BIN)/mlharness demo

# three workers, a module per worker, the slowest handed out first (tests/conftest.py): many tests
# wait (on LoadGen's clock, the power server's pauses, stall timeouts), so a third worker on two
# cores keeps them busy: 8:07 instead of 9:21 here
TEST_WORKERS ?= 3

test: export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
test:
	@# the two environments are independent: built side by side
	$(MAKE) --no-print-directory -j2 $(STAMP) $(REFEREE_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(REFEREE) runs build .pytest_cache
