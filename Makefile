# Two commands on a fresh machine: `make demo` and `make test`. Each creates the virtual
# environment first when it is missing. `make test` runs every test (the 25 slowest named at the
# end) and, beside them, the linters (`make lint`: ruff and mypy), the docs site (`make docs`: a
# broken link fails it) and Ludwig's tests in their own environment (`make test-ludwig`);
# `make test-fast` leaves out the tests marked slow (training beyond a few updates, starting
# processes), the linters and the site: under a minute. The report.html tests drive a headless
# Chromium: `make test` (not `make venv`, so not `make demo`, which opens no browser) runs
# scripts/browser.sh, which installs Debian's when none is there, and then requires it (a test
# that cannot find it fails rather than skips).
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch for this machine (its pip finds it on local disk); elsewhere pass e.g.
# TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu". The package itself
# asks only for a range.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.lrcheck-installed
# Ludwig lives in its own environment: it is heavy (about 160 packages, 2.5 GB) and pins old
# packages (rich 12). `make test` runs tests/ludwig/ there (`make test-ludwig`).
LUDWIG_VENV ?= .venv-ludwig
LUDWIG_BIN := $(LUDWIG_VENV)/bin
LUDWIG_STAMP := $(LUDWIG_VENV)/.lrcheck-installed
# Bytecode: pip installs with --no-compile, and Python compiles and caches only what a process
# imports, under $(PYCACHE) (beside no source, so the tree and the tests' folders stay clean), for
# every later process. pip would byte-compile every module of every package, about 20,000 files
# in each environment (50 s of CPU measured for .venv, on one core, before the first test
# starts), where make test imports about a quarter of them (the heavy imports of every framework
# compiled in 13 s of CPU). PYTHONDONTWRITEBYTECODE, which this machine and CI set, would
# leave that cache unwritten and every process compiling what it imports (torch alone, seconds):
# the Makefile's commands run without it.
PYCACHE ?= $(abspath $(VENV))/pycache
export PYTHONPYCACHEPREFIX := $(PYCACHE)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast test-ludwig lint docs bench venv venv-ludwig clean screenshots

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile $(TORCH)
	$(BIN)/python -m pip install --quiet --no-compile -e ".[dev,docs,accelerate,transformers,lightning,deepspeed,trl,logs]"
	touch $(STAMP)

venv-ludwig: $(LUDWIG_STAMP)

# torch first, then Ludwig with torch held at the version installed: left free, pip would take
# the newest torchvision, which pins a newer torch, and replace the CPU torch with a CUDA one.
# scripts/ludwig_venv_fixup.py then makes torchvision and torchaudio importable where their
# wheels are CUDA builds that cannot load beside a CPU torch (why: see the script).
$(LUDWIG_STAMP): pyproject.toml Makefile scripts/ludwig_venv_fixup.py
	test -x $(LUDWIG_BIN)/python || $(PYTHON) -m venv $(LUDWIG_VENV)
	$(LUDWIG_BIN)/python -m pip install --quiet --upgrade pip
	$(LUDWIG_BIN)/python -m pip install --quiet --no-compile $(TORCH)
	$(LUDWIG_BIN)/python -m pip install --quiet --no-compile -e ".[dev,ludwig]" \
		"torch==$$($(LUDWIG_BIN)/python -c 'from importlib.metadata import version; print(version("torch"))')"
	$(LUDWIG_BIN)/python scripts/ludwig_venv_fixup.py $(LUDWIG_VENV)
	touch $(LUDWIG_STAMP)

demo: $(STAMP)
	$(BIN)/lrcheck compare --accum 2 --bs 16 --ref-bs 32

lint: $(STAMP)
	$(BIN)/python -m ruff check src tests docs/hooks
	$(BIN)/python -m mypy src/lrcheck

# The linters, the docs site and Ludwig's environment and tests (mostly pip fetching and
# unpacking, then 7 tests) run beside the main tests, at the same priority: the main tests' two
# workers keep both cores busy, and a lower priority only left the beside jobs to run after
# them, on a machine half idle (Ludwig's tests, 90 s, came last). Their output goes to
# $(BESIDE_LOG) and is printed after the main tests' own; either failing fails make test.
BESIDE_LOG := $(VENV)/make-test-beside.log
# The main tests run in $(TEST_WORKERS) pytest-xdist workers, a test file to a worker (its
# module-scoped recordings made once): most tests wait on processes they start, so two workers
# on this 2-core machine keep both cores busy (the suite's CPU time is about 1.45x its serial
# wall time). TEST_WORKERS=0 runs them in this process, one after the other. The files are dealt
# in tests/conftest.py's order (--no-loadscope-reorder): those with the most slow tests first,
# the fast ones last, so that both workers stay busy to the end (xdist's own order, by number of
# tests, dealt the heavy files of two slow tests last, and one worker waited on the other;
# --no-loadscope-reorder is pytest-xdist 3.8's).
TEST_WORKERS ?= 2
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	@$(MAKE) --no-print-directory -k lint docs test-ludwig >$(BESIDE_LOG) 2>&1 & \
	beside=$$!; \
	echo "make lint docs test-ludwig >$(BESIDE_LOG), beside the main tests"; \
	required=1; [ "$$(scripts/browser.sh)" = skip ] && required=0; \
	echo "LRCHECK_REQUIRE_BROWSER=$$required $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=25"; \
	LRCHECK_REQUIRE_BROWSER=$$required $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=25; main=$$?; \
	wait $$beside; code=$$?; \
	echo "--- make lint docs test-ludwig (run beside the main tests; exit code $$code):"; \
	cat $(BESIDE_LOG); [ $$main -eq 0 ] && [ $$code -eq 0 ]

# The docs site (mkdocs.yml), offline, into site/; --strict: a broken link or anchor, or a page
# left out of the nav, fails. The reference pages are generated from the code as it builds. Not
# --quiet: it hides the warnings from --strict too, and the build passes with a broken link.
# NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2.0 (nothing to act on here).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The tests that train through Ludwig, in its environment (the main one leaves tests/ludwig/ out).
test-ludwig: $(LUDWIG_STAMP)
	$(LUDWIG_BIN)/python -m pytest -q tests/ludwig

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

# lrcheck against bare-PyTorch baselines of the same work (benchmarks/bench.py; BENCHMARKS.md).
# BENCH_ARGS, e.g. "--runs 3 --scale" or "--only help,compare".
BENCH_ARGS ?= --runs 5
bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)

# docs/img: report.html of a failing compare zoomed to its first divergence, and a suite's
# index.html, taken by the same headless Chromium as the tests.
screenshots: $(STAMP)
	scripts/browser.sh >/dev/null
	$(BIN)/python scripts/screenshots.py docs/img

clean:
	rm -rf $(VENV) $(LUDWIG_VENV) lrcheck-reports .pytest_cache site
