#!/usr/bin/env python3
"""Times huggingface_hub.get_safetensors_metadata(MODEL) against $HF_ENDPOINT.

Run by worker/benches/fetch_deepseek.rs against its mock Hub; prints one JSON line
{"wall_s", "files", "tensors"}. Requests and bytes are counted by the mock server.
"""
import json
import sys
import time

from huggingface_hub import get_safetensors_metadata

model = sys.argv[1]
started = time.perf_counter()
meta = get_safetensors_metadata(model)
wall = time.perf_counter() - started
tensors = sum(len(f.tensors) for f in meta.files_metadata.values())
print(json.dumps({"wall_s": wall, "files": len(meta.files_metadata), "tensors": tensors}))
