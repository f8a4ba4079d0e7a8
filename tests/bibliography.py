"""What the tests transcribe from the sources themselves, shared by the tests of the table of
defaults and of chapter 8: the stability note's verdicts, and the entries of references.bib."""

import re

from notebooks import ROOT

EXPECTED_VERDICTS = {
    "PyTorch LayerNorm": "right",
    "TensorFlow LayerNorm": "right value, wrong name",  # the value is Keras's LayerNormalization's
    "Llama 2 / 3 (RMSNorm)": "right for released checkpoints only",
    "Mistral (RMSNorm)": "right for released checkpoints only",
    "GPT-2 (LayerNorm)": "right",
    "BERT (LayerNorm)": "right",
}


def bib_entries() -> dict[str, str]:
    text = (ROOT / "references.bib").read_text()
    starts = list(re.finditer(r"@(\w+)\{([^,]+),", text))
    entries = {}
    for m, nxt in zip(starts, starts[1:] + [None]):
        key = m.group(2).strip()
        assert key not in entries, f"duplicate bib key {key}"
        entries[key] = text[m.start(): nxt.start() if nxt else len(text)]
    return entries
