# sepp developer entry points. Both targets set up ./.venv themselves on a fresh machine.
#   make serve   start sepp on the embedded default (SQLite in ./sepp-data, gRPC :7700, HTTP :7701)
#   make test    run the whole test suite (codegen check, lint, types, layer contracts, pytest incl. browser tests)
#                pytest runs in two processes (pytest-xdist, one module per process at a time: a module's
#                shared servers start once), then the tests marked `exclusive` (they restart PostgreSQL)
#                alone; `pytest -q` alone runs everything in one process
#   make lock    re-pin every package (runtime, dev tools, code generators) in requirements/dev.lock
#                to the newest versions pyproject.toml admits; commit the lock and run `make test`

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The versions the project is tested with (pip-tools); .venv installs exactly these.
LOCK := requirements/dev.lock

.PHONY: serve test lint bench clean lock

# One install at a time: `make serve` and `make test` started together on a fresh clone
# both need ./.venv; the second waits for the first (flock) and then finds it done.
$(STAMP): pyproject.toml $(LOCK)
	@flock $(VENV).lock sh -c '\
	  if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt $(LOCK) ]; then exit 0; fi; \
	  set -e; \
	  echo "setting up $(VENV): installing sepp and the pinned packages of $(LOCK) (the first time: a minute or more)"; \
	  $(PY) -m venv $(VENV); \
	  $(BIN)/pip install --quiet --upgrade pip; \
	  $(BIN)/pip install --quiet -c $(LOCK) -e ".[dev]"; \
	  touch $(STAMP)'

# Extra flags: make serve ARGS="--grpc-listen 127.0.0.1:7710 --http-listen 127.0.0.1:7711"
serve: $(STAMP)
	$(BIN)/sepp serve $(ARGS)

lint: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/ruff check src tests benchmarks scripts examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: $(STAMP) lint
	bash scripts/ensure-chromium.sh
	bash scripts/ensure-rust.sh
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not exclusive" --durations=40
	$(BIN)/pytest -q -m exclusive

# pip-tools runs in a throwaway venv of its own, so the lock never pins pip-tools itself.
lock:
	rm -rf $(VENV)-lock
	$(PY) -m venv $(VENV)-lock
	$(VENV)-lock/bin/pip install --quiet pip-tools
	cp $(LOCK) $(VENV)-lock/dev.lock
	$(VENV)-lock/bin/pip-compile --quiet --upgrade --extra dev --strip-extras --allow-unsafe \
	  --no-emit-index-url --no-emit-find-links --output-file $(VENV)-lock/dev.lock pyproject.toml
	sed -i 's|--output-file=$(VENV)-lock/dev.lock|--output-file=$(LOCK)|' $(VENV)-lock/dev.lock
	@# Replaced only when the pins changed: a new timestamp alone would make .venv reinstall.
	@if cmp -s $(VENV)-lock/dev.lock $(LOCK); then echo "$(LOCK): no newer versions"; \
	  else cp $(VENV)-lock/dev.lock $(LOCK); echo "$(LOCK) updated: review, run make test, commit"; fi
	rm -rf $(VENV)-lock

bench: $(STAMP)
	$(BIN)/python benchmarks/producer.py

clean:
	rm -rf $(VENV) $(VENV).lock $(VENV)-lock sepp-data
