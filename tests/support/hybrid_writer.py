"""The first process of the cross-process hybrid test: prefill a prefix, store it through
PionPromptCache, and save (state tensors, uninterrupted suffix logits) for the second process.

  python hybrid_writer.py <model_dir> <port> <prefix ids, comma-separated> <suffix ids> <out.pt>
"""

from __future__ import annotations

import sys

import torch
from transformers import AutoModelForCausalLM

from pion.client.hybrid_prefix import suffix_logits
from pion.client.prompt_cache import PionPromptCache


def main(model_dir: str, port: str, prefix: str, suffix: str, out: str) -> None:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with PionPromptCache(model, vquant="fp32", port=int(port)) as pc:
        cache = pc.get_or_prefill([int(t) for t in prefix.split(",")])
        stats = pc.stats()
        states = {}
        for i in pc.hybrid.recurrent_layers if pc.hybrid is not None else []:
            layer = cache.layers[i]
            states[i] = [t.clone() if t is not None else None
                         for s in range(layer.number_of_states)
                         for t in (layer.conv_states[s], layer.recurrent_states[s])]
        logits = suffix_logits(model, cache, [int(t) for t in suffix.split(",")])
    torch.save({"states": states, "logits": logits, "misses": stats["misses"],
                "store_failures": stats["store_failures"]}, out)


if __name__ == "__main__":
    main(*sys.argv[1:6])
