"""llama.cpp's own Python decoding of GGUF blocks (gguf-py: gguf.quants.dequantize, the
NumPy port of ggml-quants.c that llama.cpp's tools use) as the reference for latte's.

    python3 gguf_py_dequantize.py GGUF_PY_DIR FILE.gguf DIR

For every tensor T of FILE.gguf, DIR/T.npy holds latte's values (float32); prints one
JSON object: per tensor its type, value count and the number of values whose bits differ.
"""
import json
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import gguf  # noqa: E402  (from GGUF_PY_DIR)
from gguf import quants  # noqa: E402

reader = gguf.GGUFReader(sys.argv[2])
report = {}
for t in reader.tensors:
    ref = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
    got = np.load(f"{sys.argv[3]}/{t.name}.npy").reshape(-1)
    same_size = ref.size == got.size
    differ = int(np.count_nonzero(ref.view(np.uint32) != got.view(np.uint32))) if same_size else -1
    report[t.name] = {"type": t.tensor_type.name, "values": int(ref.size), "differ": differ}
print(json.dumps(report))
