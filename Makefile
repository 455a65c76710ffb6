# Zero-config LLM serving + benchmarking stack. `make up` and `make test` do all the set-up.
# Benchmark knobs: make benchmark CONCURRENCY=8 REQUESTS=50 (or DURATION=60s) WARMUP=10 MAX_TOKENS=128 WORKERS=2
# (make passes command-line variables to the recipes' environment, where the settings object reads them).
SHELL := /bin/bash
APP_PY := .venvs/app/bin/python
PYTEST_ARGS ?=

.PHONY: help history docs bench-router bench-sidecar sweep compare compose-up compose-down compose-test pin-images calibrate bench-switch bench-peer bench-ceiling bench-workers bench-lag bench-logs bench-engine bench-seed logs-errors logs-slow logs-stats baseline schema up down status benchmark benchmark-compose validate-containers doctor gpu-check test lint unit integration envs app-env engine-env browser clean

help:
	@echo "stack:      make up | down | status | doctor | gpu-check (a GPU host's verdict)"
	@echo "benchmark:  make benchmark [CONCURRENCY= REQUESTS= DURATION= RATE= WORKERS= SLO= GATE= REPEAT= PROFILE=1 ...] | baseline NAME=.. | calibrate"
	@echo "            make sweep [SWEEP=auto|concurrency:1,2,4|rate:0.5,1,2 SLO= REPEAT=] | compare A=<id|baseline> B=<id|baseline> | history"
	@echo "logs:       make logs-errors | logs-slow [THRESHOLD_MS=] | logs-stats [SINCE=]"
	@echo "dev:        make test | lint | docs | unit | integration | schema | validate-containers | bench-peer | bench-ceiling | bench-workers | bench-lag | bench-logs | bench-engine | bench-seed | bench-switch | bench-router | bench-sidecar | clean"
	@echo "containers: make compose-up [REPLICAS=N] | compose-down | compose-test | benchmark-compose | pin-images (see README, Docker and GPUs)"

# Both environments at once, with uv (scripts/setup_env.sh; pip where uv cannot be had): a fresh clone's two in ≈ 30 s
# instead of pip's ≈ 2 min.
envs:
	@scripts/setup_env.sh app & app=$$!; scripts/setup_env.sh engine; engine=$$?; wait $$app && exit $$engine

app-env:
	@scripts/setup_env.sh app

engine-env:
	@scripts/setup_env.sh engine

browser:
	@scripts/setup_browser.sh

up: envs
	$(CHECK_VARS)
	@$(APP_PY) -m stack.control up

down:
	@if [ -x $(APP_PY) ]; then $(APP_PY) -m stack.control down; else echo "[INFO] nothing to stop"; fi

status: app-env
	@$(APP_PY) -m stack.control status

# Names of the variables given on make's command line (make benchmark CONCURENCY=4): core.envtypos refuses typos.
CLI_VARS = $(strip $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
CHECK_VARS = @$(APP_PY) -m stack.makevars $@ $(CLI_VARS)

benchmark: app-env
	$(CHECK_VARS)
	@$(APP_PY) -m loadgen.command.benchmark

# A load sweep (SWEEP=auto unless given): every point a report, plus a series report with the SLO knee.
sweep: app-env
	$(CHECK_VARS)
	@SWEEP="$(or $(SWEEP),auto)" $(APP_PY) -m loadgen.command.benchmark

compare: app-env
	@$(APP_PY) -m loadgen.command.compare "$(A)" "$(B)"

# Each workload's runs over time (a table, and reports/history.html); REPORTS=<folder> for another reports folder.
history: app-env
	@$(APP_PY) -m sidecar.reports.history $(REPORTS)

lint: app-env
	$(APP_PY) -m ruff check .
	@# every tracked Python file is linted (an exclude pattern such as "reports" once skipped sidecar/reports/)
	@skipped=$$(comm -23 <(git ls-files '*.py' | sort) <($(APP_PY) -m ruff check . --show-files | sed "s|^$$PWD/||" | sort)); \
	  if [ -n "$$skipped" ]; then echo "[ERROR] ruff does not check: $$skipped (pyproject.toml's exclude)"; exit 1; fi
	$(APP_PY) -m mypy
	.venvs/app/bin/lint-imports --no-cache --no-logo
	@scripts/validate_containers.sh >/dev/null || scripts/validate_containers.sh
	$(APP_PY) scripts/check_kubernetes.py
	$(APP_PY) -m sidecar.reports.schema_export --check
	$(APP_PY) -m stack.config_reference --check docs/reference.md
	$(APP_PY) -m engine.gpupeakdoc --check docs/engine.md
	@site=$$(mktemp -d); NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true .venvs/app/bin/mkdocs build --strict --quiet --site-dir "$$site"; rc=$$?; rm -rf "$$site"; exit $$rc

# The documentation site (docs/, MkDocs Material) into site/; the settings reference is generated from the settings.
docs: app-env
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true .venvs/app/bin/mkdocs build --strict
	@echo "[INFO] site/index.html (or: .venvs/app/bin/mkdocs serve)"

schema: app-env
	@$(APP_PY) -m sidecar.reports.schema_export

baseline: app-env
	@$(APP_PY) -m loadgen.command.baseline "$(NAME)" $(REPORT)

unit: app-env
	$(APP_PY) -m pytest tests/unit -q $(PYTEST_ARGS)

integration: envs browser
	$(APP_PY) -m pytest tests/integration -q -m integration $(PYTEST_ARGS)

# Everything CI runs (.ci/run): lint, unit and integration tests, and the compose stack for real (make compose-test),
# side by side in three processes (scripts/run_tests.sh).
test: envs browser
	@scripts/run_tests.sh $(PYTEST_ARGS)

logs-errors: app-env
	@$(APP_PY) -m logtools --errors $(if $(SINCE),--since $(SINCE)) $(if $(JSON),--json)

logs-slow: app-env
	@$(APP_PY) -m logtools --slow --threshold-ms $(or $(THRESHOLD_MS),1000) $(if $(SINCE),--since $(SINCE)) $(if $(JSON),--json)

logs-stats: app-env
	@$(APP_PY) -m logtools --stats $(if $(SINCE),--since $(SINCE)) $(if $(JSON),--json)

calibrate: app-env
	@$(APP_PY) -m loadgen.selftest.calibrate

bench-peer: envs
	@$(APP_PY) benchmarks/bench_peer_agreement.py --write-readme

bench-ceiling: envs
	@$(APP_PY) benchmarks/bench_client_ceiling.py --repeats 3

bench-workers: app-env
	@$(APP_PY) benchmarks/bench_scaleout.py

bench-lag: app-env
	@$(APP_PY) benchmarks/bench_lag_verdict.py

# What vLLM's router adds: TTFT and ITL through vllm-router ÷ direct, same server, alternating rounds.
bench-router: app-env
	@$(APP_PY) benchmarks/bench_router.py $(ARGS)

# The sidecar's own CPU between runs: a client per /metrics scrape vs its kept connection, and a real sidecar idle.
bench-sidecar: app-env
	@$(APP_PY) benchmarks/bench_sidecar_idle.py $(ARGS)

# A model switch, the switch back and a restart under 2 chat requests/s (stack up): failed, cut, gaps, time to answer.
bench-switch: app-env
	@$(APP_PY) benchmarks/bench_switch.py $(ARGS)

bench-logs: app-env
	@$(APP_PY) benchmarks/bench_log_analyzer.py
	@$(APP_PY) benchmarks/bench_request_stats.py
	@$(APP_PY) benchmarks/bench_startup_big_log.py

# The seed's two benchmark commands, full size, on the running stack (make up first), with the engine's speed probe.
bench-seed: app-env
	@$(APP_PY) benchmarks/bench_seed.py

bench-engine: envs
	@$(APP_PY) benchmarks/bench_engine_defaults.py $(if $(REPEATS),--repeats $(REPEATS)) $(if $(VARIANTS),--variants $(VARIANTS))

# Why the GPU stack would not start (driver vs image CUDA, Container Toolkit, free GPU memory, writable checkout, HF, ports)
doctor: app-env
	@$(APP_PY) -m engine.doctor

# The first GPU host's verdict (docs/gpu.md): make doctor, the GPU tests, docker compose up, ./run_benchmark.sh, and the
# measured GPU peak against the seed's 2.8 GB and the plan's prediction; refuses (exit 2) where no GPU is seen.
gpu-check: app-env
	@$(APP_PY) scripts/gpu_check.py $(ARGS)

validate-containers: app-env
	scripts/validate_containers.sh

# make benchmark-compose CONCURRENCY=8 REQUESTS=50, or any flag: make benchmark-compose ARGS="--concurrency 8 --rate 2"
BENCH_VARS := CONCURRENCY REQUESTS DURATION WARMUP MAX_TOKENS TEMPERATURE SEED RATE SLO GATE GATE_THRESHOLD_PCT \
	DATASET PROFILE INPUT_MIX IGNORE_EOS BURSTINESS RAMP_UP_S OUTPUT_LEN OUTPUT_LEN_MEAN OUTPUT_LEN_P95 \
	SWEEP SWEEP_RATES REPEAT COOLDOWN_S SLO_ATTAINMENT_PCT MAX_IN_FLIGHT RATE_END RANDOM_INPUT_LEN RANDOM_OUTPUT_LEN \
	SESSION_TURNS WORKERS PREFIX_LEN PREFIX_COUNT
benchmark-compose:
	$(CHECK_VARS)
	scripts/compose.sh exec -T $(foreach v,$(BENCH_VARS),$(if $($(v)),-e $(v)=$($(v)))) locust-master python -m loadgen.command.benchmark $(ARGS)
	@echo "[INFO] /app/reports in the containers is ./reports here"

# The compose stack (Docker Engine, else Podman; CPU overlay without a GPU): scripts/compose_stack.sh, docs/docker.md.
compose-up: app-env
	@scripts/compose_stack.sh up

compose-down:
	@scripts/compose_stack.sh down

compose-test: app-env browser
	@scripts/compose_stack.sh test

# Base images pinned by digest (docs/docker.md, "Base images"): needs the registry and docker buildx, skopeo, crane or
# regctl. make pin-images ARGS=--check only reports.
pin-images:
	scripts/pin_base_images.sh $(ARGS)

clean: down
	@scripts/container_engine.sh stop
	rm -rf run .mypy_cache .ruff_cache .pytest_cache
