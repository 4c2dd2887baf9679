VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,spark,chaos

.PHONY: install run test sim-long spark-cluster bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/ledgermq dev

test: install
	$(PY) -m pytest -q

# every simulator protocol over SIM_SEEDS seeds, every injected bug caught (minutes)
SIM_SEEDS ?= 2000
sim-long: install
	$(PY) -m tests.sim.long --seeds $(SIM_SEEDS)

# the example pipeline on a real Spark standalone cluster: a master, two workers,
# spark-submit --py-files (a few minutes)
spark-cluster: install
	$(PY) -m pytest -q -m slow tests/spark/test_standalone_cluster.py

bench: install
	$(PY) bench/store_bench.py

clean:
	rm -rf $(VENV) build *.egg-info
