VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,spark,chaos

.PHONY: install run test typecheck test-slow sim-long spark-cluster chaos chaos-rocketmq bench bench-timer bench-grpc bench-rocketmq bench-tls bench-requests bench-instructions proto \
	clean fuzz sanitize bench-native soak compat

$(VENV)/.installed: pyproject.toml setup.py $(wildcard ledgermq/wire/_native*.[ch])
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	# bytecode beside the sources (an editable install gets none, and where
	# PYTHONDONTWRITEBYTECODE is set nothing writes it): each broker, CLI or test process
	# then starts without compiling the package (~1 s on a busy 2-core machine)
	$(PY) -m compileall -q ledgermq
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/ledgermq dev

test: install typecheck
	$(PY) -m pytest -q -n 2 --dist loadgroup

# mypy --strict on the replication cores, the wire formats, the broker and the client ([tool.mypy])
typecheck: install
	$(PY) -m mypy

# 1,000 hostile connections for SOAK_SECONDS beside a real client: the broker's RSS stays
# bounded and the real client loses nothing (tests/security/test_soak.py)
soak: install
	SOAK_SECONDS=$${SOAK_SECONDS:-60} $(PY) -m pytest -q -s -m slow tests/security/test_soak.py

# RocketMQ's own clients, the longer runs left out of make test (marked compat): the Java
# push consumer through %RETRY%, every kind of send, the lite pull consumer, and the
# RocketMQ anchor (Apache RocketMQ from Maven Central driven by its benchmark producer), and
# RocketMQ's DLedger layout under a chaos run (a killed leader)
compat: install
	$(PY) -m pytest -q -m compat tests/compat tests/chaos/test_rocketmq_side.py

# the tests left out of the default run (marked slow: long chaos runs, a Spark cluster)
test-slow: install
	$(PY) -m pytest -q -m slow

# every simulator protocol over SIM_SEEDS seeds (a process per core), every injected bug
# caught (about an hour on 2 cores)
SIM_SEEDS ?= 10000
sim-long: install
	$(PY) -m tests.sim.long --seeds $(SIM_SEEDS)

# the example pipeline on a real Spark standalone cluster: a master, two workers,
# spark-submit --py-files (a few minutes)
spark-cluster: install
	$(PY) -m pytest -q -m slow tests/spark/test_standalone_cluster.py

# every mode under seeded faults on test hosts (root): CHAOS_DURATION s each, results in
# chaos-results/MODE/ (results.json, history.jsonl, timeline.png); skips saying why when
# this machine cannot make network namespaces
CHAOS_DURATION ?= 600
CHAOS_SEED ?= 1
CHAOS_MODES ?= dledger sync async checkpoint controller
CPP_CLIENT := .cache/rocketmq-0.4.4
$(CPP_CLIENT)/.ready:
	python3 -m venv --clear $(CPP_CLIENT)
	$(CPP_CLIENT)/bin/python -m pip install -q rocketmq==0.4.4
	touch $@

chaos: install $(CPP_CLIENT)/.ready
	@status=0; for m in $(CHAOS_MODES); do \
	  $(VENV)/bin/ledgermq chaos --mode $$m --duration $(CHAOS_DURATION) \
	    --seed $(CHAOS_SEED) --cpp-client $(CPP_CLIENT)/bin/python \
	    --out chaos-results/$$m; rc=$$?; \
	  if [ $$rc -eq 3 ]; then exit 0; fi; \
	  if [ $$rc -ne 0 ]; then status=1; fi; \
	done; exit $$status

# Apache RocketMQ (Maven Central) under the same seeded schedules as ledgermq (#34): its
# DLedger and controller layouts on test hosts, every fault family both can take, each seed
# run on ledgermq then on RocketMQ; the side-by-side table in chaos-results/rocketmq/
CHAOS_COMPARE_SEEDS ?= 1 2 3
chaos-rocketmq: install $(CPP_CLIENT)/.ready
	mkdir -p chaos-results/rocketmq
	$(PY) -m bench.rocketmq_chaos --modes dledger,controller --seeds "$(CHAOS_COMPARE_SEEDS)" \
	  --duration $(CHAOS_DURATION) --cpp-client $(CPP_CLIENT)/bin/python \
	  --out chaos-results/rocketmq | tee chaos-results/rocketmq/table.md

bench: install
	$(PY) bench/store_bench.py

# timer messages: bytes per pending timer (1,000,000 pending), delivery lateness under load
bench-timer: install
	$(PY) bench/timer_bench.py

# the compiled wire module against its pure-Python twins: a differential fuzz run of
# FUZZ_SECONDS (make test runs the same for 20 s), corpus kept in .fuzz-corpus/; then
# every request code and gRPC call with hostile fields, FUZZ_EXAMPLES of each (make test
# runs 150)
FUZZ_SECONDS ?= 600
FUZZ_EXAMPLES ?= 20000
fuzz: install
	$(PY) -m tests.fuzz.fuzz_wire -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 .fuzz-corpus
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q tests/security/test_request_fuzz.py \
		tests/grpcserver/test_hostile_peers.py

# the compiled wire module built with ASan + UBSan: twin tests and fuzzing against it
sanitize: install
	PY=$(PY) bash tests/fuzz/sanitize.sh 60

# the compiled wire functions beside their pure twins: per function (native_micro.py),
# then the single-node workloads native and LEDGERMQ_PURE=1 beside NATS (nats-py and Go)
bench-native: install
	$(PY) bench/native_micro.py
	$(PY) bench/native_bench.py

# RocketMQ 5's gRPC endpoint next to remoting (sync send, pipelined, consume everything),
# grpcio's own floor, then RocketMQ's Java gRPC client against ledgermq's endpoint, RocketMQ's
# proxy (local mode), ledgermq behind RocketMQ's proxy (cluster mode) and the floor under
# that client (bench/grpc_floor_broker.py), CPU per process; the endpoint's calls in process
# (bench/grpc_micro.py)
bench-grpc: install
	$(PY) bench/grpc_bench.py
	$(PY) bench/grpc_floor.py
	$(PY) bench/grpc_micro.py
	$(PY) bench/rocketmq_bench.py --layouts proxy --quick

# ledgermq beside Apache RocketMQ 5 (from Maven Central) in every layout, both driven by
# RocketMQ's Java client: latency, throughput, CPU per message, RSS, failover and loss
bench-rocketmq: install
	$(PY) bench/rocketmq_bench.py

# instructions per SEND in process, counted by valgrind (steady whatever else runs)
bench-instructions: install
	$(PY) bench/request_instructions.py

# one message per request, as RocketMQ's clients send: N processes of its C++ client against
# ledgermq (native and pure), RocketMQ 5 and the floor (a Python server that answers at once,
# bench/request_floor.py), single node and DLedger x3 (bench/request_bench.py);
# then the broker's request path in process, without the kernel (bench/request_micro.py)
bench-requests: install $(CPP_CLIENT)/.ready
	$(PY) bench/request_bench.py
	$(PY) bench/request_micro.py

# the cost of TLS on a single node: sync send p50, pipelined throughput, a new connection
bench-tls: install
	$(PY) bench/tls_bench.py

# the gRPC API's Python modules (committed) from ledgermq/apis/*.proto
proto: install
	$(PY) -m pip install -q grpcio-tools==1.85.1
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. \
		ledgermq/apis/definition.proto ledgermq/apis/service.proto

clean:
	rm -rf $(VENV) build *.egg-info ledgermq/wire/_native*.so
