"""The GGUF spellings of a vocabulary: ``tokenizer.*`` key names and token-type values."""
from __future__ import annotations

# gguf TokenType / llama.cpp SentencePieceTokenTypes values.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Key names as gguf-py spells them (the normalizer keys are newer than gguf 0.19.0's Keys).
K_MODEL = "tokenizer.ggml.model"
K_PRE = "tokenizer.ggml.pre"
K_TOKENS = "tokenizer.ggml.tokens"
K_SCORES = "tokenizer.ggml.scores"
K_TOKEN_TYPE = "tokenizer.ggml.token_type"
K_MERGES = "tokenizer.ggml.merges"
K_ADD_PREFIX = "tokenizer.ggml.add_space_prefix"
K_MASK_ID = "tokenizer.ggml.mask_token_id"
K_CHAT_TEMPLATE = "tokenizer.chat_template"
K_CHAT_TEMPLATES = "tokenizer.chat_templates"
K_NORM_LOWER = "tokenizer.ggml.normalizer.lowercase"
K_NORM_STRIP = "tokenizer.ggml.normalizer.strip_accents"
