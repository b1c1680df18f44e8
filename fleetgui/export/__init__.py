"""HuggingFace model to per-stage OpenVINO shards: adapters, tracing, compression, verification."""
