# The two commands in README.md: `make demo` (the main job) and `make test` (the whole test suite).
# Both create .venv and install the project from pyproject.toml the first time.
PY ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml setup.py ros2_ws/src/tinker/setup.py
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip 'setuptools<80' wheel
	$(VENV)/bin/pip install -q -e '.[dev]'
	$(VENV)/bin/pip install -q --no-deps --no-build-isolation -e ros2_ws/src/tinker
	$(VENV)/bin/python -c 'from tinker_core.algos.native import main; raise SystemExit(main())' \
		|| echo "SAC and PPO will use their Python steps (see above)"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tinker demo

test: $(STAMP)
	bash .ci/test.sh

.PHONY: setup demo test
