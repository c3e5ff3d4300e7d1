# Flexway's build. `make run` starts the gateway offline against the local
# sample model; `make test` is what CI runs.

GO      ?= go
BIN     := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

BUF_VERSION              := v1.75.0
PROTOC_GEN_GO_VERSION    := v1.36.12
PROTOC_GEN_GRPC_VERSION  := v1.6.2
GRPCURL_VERSION          := v1.9.4
GRPC_GATEWAY_VERSION     := v2.33.0

.PHONY: all tools generate check-generated lint-proto build run test test-short soak bench fuzz clean example-ocr

all: build

# Code generators and grpcurl, pinned, into the repo-local .bin/ (git-ignored).
tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)
$(BIN)/protoc-gen-grpc-gateway:
	GOBIN=$(BIN) $(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(BIN)/grpcurl:
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

# Short names for the tools, e.g. `make .bin/grpcurl`.
.bin/%: $(BIN)/% ;

# Rebuild gen/ from proto/ (offline: local plugins, no BSR).
generate: tools
	rm -rf gen examples/ocr/gen
	$(BIN)/buf generate
	$(BIN)/buf generate --template examples/ocr/buf.gen.yaml

# Fails when the committed gen/ does not match what proto/ generates; the
# tree is left untouched. Also lints the protos.
check-generated: tools
	$(BIN)/buf lint
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(BIN)/buf generate -o $$tmp && \
	$(BIN)/buf generate --template examples/ocr/buf.gen.yaml -o $$tmp && \
	if diff -r gen $$tmp/gen && diff -r examples/ocr/gen $$tmp/examples/ocr/gen; then echo "gen/ is up to date"; else echo "gen/ is stale: run make generate and commit gen/" >&2; exit 1; fi

lint-proto: $(BIN)/buf
	$(BIN)/buf lint

build:
	$(GO) build -o bin/flexway ./cmd/flexway
	$(GO) build -o bin/flexway-sample ./cmd/flexway-sample

# The OCR example (README, "Meter a specialised model"): the descriptor set
# Flexway reads the methods' metering from, and the example model's server.
example-ocr: $(BIN)/buf
	$(BIN)/buf build examples/ocr/proto -o examples/ocr/ocr.binpb
	$(GO) build -o bin/ocr-server ./examples/ocr/server

# The gateway on examples/flexway.yaml in front of the local sample model,
# offline: one flexway-sample process per wire format (WIRE:PORT below, the
# backends' urls in the file), each checked started, all stopped with the
# gateway. Ctrl-C stops everything.
# The demo API key is sk-flexway-demo (its SHA-256 is in the file); the
# admin key is $FLEXWAY_ADMIN_KEY, sk-flexway-admin-demo when unset.
SAMPLE_WIRES := openai:8000 anthropic:8001 gemini:8002 a2a:8003

run: build
	@mkdir -p flexway-data
	@started=""; \
	trap 'for s in $$started; do kill $${s%%:*} 2>/dev/null; done' EXIT INT TERM; \
	for w in $(SAMPLE_WIRES); do \
		bin/flexway-sample --wire $${w%%:*} --listen 127.0.0.1:$${w#*:} --rate-limit-key sample-key-2 & started="$$started $$!:$$w"; \
	done; \
	sleep 0.5; \
	for s in $$started; do \
		w=$${s#*:}; kill -0 $${s%%:*} 2>/dev/null || { echo "make run: the $${w%%:*} sample model could not start on 127.0.0.1:$${w#*:} (port in use?)" >&2; exit 1; }; \
	done; \
	FLEXWAY_ADMIN_KEY="$${FLEXWAY_ADMIN_KEY:-sk-flexway-admin-demo}" bin/flexway serve --config examples/flexway.yaml

test: $(BIN)/grpcurl
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

# The long versions of the tests whose short versions make test runs
# (FLEXWAY_SOAK=1): the cap under many concurrent callers, the audit
# writer's race test, kill -9 of the gateway compared with its ledger, and
# two replicas on one Redis across Redis restarts, a rollback and a killed
# replica. About five minutes on two cores.
SOAK_TESTS := TestCapHoldsWithAnHonestTokenizer|TestConcurrentWritesEachLineOnce|TestKill9AuditEqualsLedger|TestKill9AuditEqualsRedisLedger|TestRedisReplicasHoldAcrossRedisRestarts|TestRedisReplicaKilledMidStream|TestRedisRollbackRefusedByReplicas

soak: $(BIN)/grpcurl
	FLEXWAY_SOAK=1 $(GO) test -race -count=1 -timeout 60m -run '^($(SOAK_TESTS))$$' -v ./cmd/flexway/ ./server/auditlog/

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./cmd/flexway-load

# One target per run (go test -fuzz takes one): the OpenAI request parser,
# then each wire format's stream decoder, which must never panic, and the
# fast paths checked against encoding/json (the shared scanner, Anthropic's
# answer decoder, A2A's answers, Gemini's schema reduction against its
# map-based oracle).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseChatCompletionRequest -fuzztime 60s ./server/openaiwire/
	$(GO) test -run '^$$' -fuzz FuzzAnthropicStream -fuzztime 30s ./server/backends/anthropic/
	$(GO) test -run '^$$' -fuzz FuzzGeminiStream -fuzztime 30s ./server/backends/gemini/
	$(GO) test -run '^$$' -fuzz FuzzA2AStream -fuzztime 30s ./server/backends/a2a/
	$(GO) test -run '^$$' -fuzz FuzzA2ADecode -fuzztime 30s ./server/backends/a2a/
	$(GO) test -run '^$$' -fuzz FuzzScanner -fuzztime 30s ./server/backends/jsonscan/
	$(GO) test -run '^$$' -fuzz FuzzAnthropicDecode -fuzztime 30s ./server/backends/anthropic/
	$(GO) test -run '^$$' -fuzz FuzzReduceSchema -fuzztime 30s ./server/backends/gemini/
	$(GO) test -run '^$$' -fuzz FuzzCacheTokens -fuzztime 20s ./server/openaiwire/
	$(GO) test -run '^$$' -fuzz FuzzScanner -fuzztime 30s ./server/guardrail/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 20s ./server/toolcalls/
	$(GO) test -run '^$$' -fuzz FuzzUnescape -fuzztime 20s ./server/jsonstring/
	$(GO) test -run '^$$' -fuzz FuzzNewKeys -fuzztime 30s ./server/cache/

clean:
	rm -rf bin flexway-data
