PY ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench clean

$(VPY):
	@command -v $(PY) >/dev/null 2>&1 || { echo "need $(PY) on PATH (or run: make PY=python3 ...)"; exit 2; }
	$(PY) -m venv $(VENV)

$(STAMP): $(VPY) pyproject.toml
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(VPY) -m ruff check .
	$(VPY) -m pytest -q

demo: $(STAMP)
	$(VPY) -m distrib.demo

bench: $(STAMP)
	$(VPY) bench/transport.py

clean:
	rm -rf $(VENV) build *.egg-info
