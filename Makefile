# sandboxd: run `make help` for the targets.

SHELL := /bin/sh
GO ?= go
BIN := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION := v0.8.2

# The clients' generated code: Python from Debian's protoc and
# grpc_python_plugin, TypeScript from ts-proto (locked in
# clients/typescript), google.rpc's error details from the descriptors in
# the Go module the daemon encodes them with (clients/rpcdesc).
TS_NODE_MODULES := clients/typescript/node_modules/.package-lock.json
TS_PROTO_OPTS := outputServices=grpc-js,esModuleInterop=true,forceLong=number,importSuffix=.js,env=node,useDate=true,oneof=unions-value,outputJsonMethods=false,outputPartialMethods=false
PY_GEN := clients/python/src/sandboxd
TS_GEN := clients/typescript/src/gen

.PHONY: help build docker-image tools setup hooks check test test-unit test-unprivileged test-integration test-matrix soak fuzz lint proto proto-check clients images bench k8s-binaries k8s-e2e install run stop

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/sandboxd and its container init bin/sandboxd-init (static)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sandboxd ./cmd/sandboxd
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(BIN)/sandboxd-init ./cmd/sandboxd-init

TOOLS_STAMP := $(BIN)/.tools-$(PROTOC_GEN_GO_VERSION)-$(PROTOC_GEN_GO_GRPC_VERSION)-$(STATICCHECK_VERSION)

docker-image: setup ## build the daemon's own image, sandboxd/daemon (offline)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sandboxd-static ./cmd/sandboxd
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o $(BIN)/sandboxd-init ./cmd/sandboxd-init
	install -m 0755 /usr/local/lib/sandboxd/runsc $(BIN)/runsc
	install -m 0644 /var/lib/sandboxd/images.lock $(BIN)/images.lock
	docker build -t sandboxd/daemon .

tools: $(TOOLS_STAMP) ## install the pinned code generators and linters into bin/

$(TOOLS_STAMP):
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

setup: ## install the OCI runtimes, and the Docker engine and containerd for the tests; build the sandbox images (idempotent; root)
	scripts/setup.sh

hooks: ## check each commit before a push: gofmt, the layout tests, the subject (scripts/check-commits.sh)
	git config core.hooksPath .githooks

check: lint test-unit ## the quick loop: lint and unit tests, with no root and no engine

test: ## everything CI runs, in two lanes at once, with each phase's time and the slowest tests at the end (scripts/ci.sh)
	scripts/ci.sh

test-unit: ## unit tests, with the race detector (no engine needed)
	$(GO) test -race -count=1 ./...

test-unprivileged: ## unit tests as the user nobody, on a copy of the tree it cannot write (root)
	scripts/test-unprivileged.sh ./...

# A count, not a duration: go1.26's fuzz coordinator can fail a duration run
# at its deadline with no failing input (golang/go#75804).
FUZZRUNS ?= 20000

fuzz: ## run each fuzz target FUZZRUNS (20000) times: requests through the engine and from the API's bytes, the judge's comparisons
	$(GO) test -run '^$$' -fuzz '^FuzzRun$$' -fuzztime $(FUZZRUNS)x ./task/
	$(GO) test -run '^$$' -fuzz '^FuzzRunRequests$$' -fuzztime $(FUZZRUNS)x ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzMatch$$' -fuzztime $(FUZZRUNS)x ./task/judge/

test-integration: setup ## integration tests against the real engines, each case on CI's matrix; they fail rather than skip
	scripts/test-integration.sh

test-matrix: setup ## every engine-suite case on every backend and OCI runtime pair, and the image rebuild (docs/development.md)
	SANDBOXD_MATRIX=all scripts/test-integration.sh

# The soaking tests, in full: CI runs each a few times (testutil.Soak).
SOAK_TESTS := Test(Direct|Docker|Containerd)(Runc|Crun|Runsc)$$/PoolOn/PooledContainerNeverReused

soak: setup ## the long repetitions CI runs a few times each, in full (500 tasks a pair on runc, 100 on gVisor)
	SANDBOXD_SOAK=1 SANDBOXD_MATRIX=all SANDBOXD_REQUIRE_BACKENDS=1 $(GO) test -tags integration -count=1 -timeout 90m -run '$(SOAK_TESTS)' ./conformance/

# Every file builds with one of the tags or with none: one pass with all
# of them reads every file.
ALL_TAGS := integration,k8s

lint: tools $(TS_NODE_MODULES) ## gofmt, go vet and staticcheck (once, every build tag); pyflakes and tsc on the clients
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	/usr/bin/python3 -m pyflakes clients/python/src/sandboxd/*.py clients/python/tests task/tools/lib/python/sandboxd/*.py
	cd clients/typescript && node_modules/.bin/tsc --noEmit -p .
	$(GO) vet -tags $(ALL_TAGS) ./...
	$(BIN)/staticcheck -tags $(ALL_TAGS) ./...


$(TS_NODE_MODULES): clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund --prefer-offline

proto: tools $(TS_NODE_MODULES) ## regenerate the API's code: Go, and the Python and TypeScript clients'
	PATH=$(BIN):$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		proto/sandboxd/v1/sandboxd.proto
	$(GO) run ./clients/rpcdesc -o $(BIN)/rpc.pb
	rm -rf $(PY_GEN)/v1 $(PY_GEN)/rpc $(TS_GEN)
	mkdir -p $(TS_GEN)
	protoc -I proto --python_out=clients/python/src --pyi_out=clients/python/src \
		--plugin=protoc-gen-grpc_python=$$(command -v grpc_python_plugin) --grpc_python_out=clients/python/src \
		proto/sandboxd/v1/sandboxd.proto
	protoc --descriptor_set_in=$(BIN)/rpc.pb --python_out=clients/python/src --pyi_out=clients/python/src \
		sandboxd/rpc/status.proto sandboxd/rpc/error_details.proto
	protoc -I proto --plugin=protoc-gen-ts_proto=clients/typescript/node_modules/.bin/protoc-gen-ts_proto \
		--ts_proto_out=$(TS_GEN) --ts_proto_opt=$(TS_PROTO_OPTS) proto/sandboxd/v1/sandboxd.proto
	protoc --descriptor_set_in=$(BIN)/rpc.pb --plugin=protoc-gen-ts_proto=clients/typescript/node_modules/.bin/protoc-gen-ts_proto \
		--ts_proto_out=$(TS_GEN) --ts_proto_opt=$(TS_PROTO_OPTS),outputServices=false \
		sandboxd/rpc/status.proto sandboxd/rpc/error_details.proto

GENERATED := proto $(PY_GEN)/v1 $(PY_GEN)/rpc $(TS_GEN)

proto-check: proto ## fail when the committed generated code (Go, Python, TypeScript) is stale
	@git diff --exit-code -- $(GENERATED) || { echo "generated code is stale: run make proto and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --porcelain -- $(GENERATED); echo "untracked generated files"; exit 1; }

clients: $(TS_NODE_MODULES) ## build the Python wheel and the npm package into clients/dist
	/usr/bin/python3 -m build --no-isolation --skip-dependency-check --wheel --outdir clients/dist clients/python
	cd clients/typescript && npm pack --silent --pack-destination ../dist
	@# The wheel is written through a temporary file, mode 0600: others
	@# installing it (a CI user, a container build) must read it.
	chmod a+r clients/dist/*

images: build ## build the sandbox images from their recipes, offline and bit for bit (FORCE=1: all again)
	$(BIN)/sandboxd image build $(if $(filter 1,$(FORCE)),--force)

bench: setup build $(TS_NODE_MODULES) ## latency, throughput, CPU per task by process and memory vs docker run --rm, side by side, with a chart
	cd clients/typescript && npm run --silent build
	$(GO) run ./bench -runs 200 -duration 30s
	$(GO) test -tags integration -run '^$$' -bench SessionCheckpoint -benchtime 1x ./runtime/direct/

k8s-binaries: ## build Kubernetes and etcd from the Go module proxy, cached by version (K8S_VERSION)
	scripts/k8s-build.sh

k8s-e2e: docker-image ## deploy/kubernetes on a real single-node cluster built offline, then torn down
	scripts/k8s-e2e.sh

install: setup build ## install the daemon as a systemd service: /usr/local/bin, /etc/sandboxd, /var/lib/sandboxd (root)
	scripts/install.sh

run: build ## set up (the OCI runtimes and the images; no engine), build and start the daemon in the background
	scripts/setup.sh --no-engines
	scripts/run.sh

stop: ## stop the daemon started by make run
	scripts/run.sh stop
