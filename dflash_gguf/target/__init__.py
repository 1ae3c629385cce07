"""The target model: its tokenizer as GGUF vocab keys, and what the drafter needs to know of it."""
