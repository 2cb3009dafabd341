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

.PHONY: demo test venv referee clean bench

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# --no-compile: byte-compiling every dependency took a quarter of the install; Python
	# compiles what the demo imports on first use
	$(BIN)/pip install --quiet --no-compile -e .
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,report,ray,power,openvino,torch]'
	touch $(STAMP)

venv: $(STAMP)

$(REFEREE_STAMP): tests/referee-requirements.txt
	test -x $(REFEREE)/bin/python || $(PYTHON) -m venv $(REFEREE)
	$(REFEREE)/bin/pip install --quiet -r tests/referee-requirements.txt
	touch $(REFEREE_STAMP)

referee: $(REFEREE_STAMP)

demo: $(BASE_STAMP)
	$(BIN)/mlharness demo

# two workers, a module per worker, the slowest handed out first (tests/conftest.py): most tests
# wait on LoadGen's clock
TEST_WORKERS ?= 2

test: $(STAMP) $(REFEREE_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(REFEREE) runs build .pytest_cache
