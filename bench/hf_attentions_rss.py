#!/usr/bin/env python3
"""Peak RSS of HF transformers (float32, eager attention) with output_attentions=True over
n tokens of the default model: what recording per-head attention costs in the Python stack.

    python3 bench/hf_attentions_rss.py 2048      # needs torch, transformers, gguf, accelerate
"""
import os
import random
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

n = int(sys.argv[1])
torch.set_num_threads(2)
m = AutoModelForCausalLM.from_pretrained(os.path.dirname(MODEL), gguf_file=os.path.basename(MODEL),
                                         torch_dtype=torch.float32, attn_implementation="eager")
rng = random.Random(0)
x = torch.tensor([[rng.randrange(17, 49152) for _ in range(n)]])
t0 = time.perf_counter()
with torch.no_grad():
    out = m(x, use_cache=False, output_attentions=True, logits_to_keep=1)
wall = time.perf_counter() - t0
held = sum(a.numel() * a.element_size() for a in out.attentions)
print(f"transformers output_attentions, {n} tokens: wall {wall:.1f} s, attentions held "
      f"{held/2**30:.2f} GiB, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/2**20:.2f} GiB")
