"""File formats on disk: GGUF (bounds-checked reader, streaming atomic writer) and safetensors."""
