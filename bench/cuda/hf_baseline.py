"""hf_baseline.py — the "Python user" baseline of docs/bench.md's H200 table: Hugging Face
transformers generating 128 tokens greedily from random bf16 weights of a published shape
(bench/configs/*.json), batch 1: the dynamic cache, the static cache with generate's own
compilation turned off, and the static cache as generate runs it by default (transformers
compiles the forward itself, CUDA graphs included, when the cache is compileable: a second
torch.compile of model.forward on top of that collides with it, so there is no such mode).
Prints one line per mode: tokens/s of the 128 generated tokens (prompt of 16 tokens included
in the time, as llama-bench's tg128 excludes it: the prompt is 1/50 of the work here)."""
import json, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM

cfg_path = sys.argv[1] if len(sys.argv) > 1 else "bench/configs/llama-3.2-1b.json"
cfg = AutoConfig.for_model(**{k: v for k, v in json.load(open(cfg_path)).items() if k != "architectures"})
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()
ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda")
print("transformers", __import__("transformers").__version__, "torch", torch.__version__, flush=True)

def run(**kw):
    out = model.generate(ids, max_new_tokens=128, min_new_tokens=128, do_sample=False, **kw)
    torch.cuda.synchronize()
    return out

for mode, kw in [("dynamic cache", {}),
                 ("static cache, compile off", {"cache_implementation": "static", "disable_compile": True}),
                 ("static cache (generate's torch.compile)", {"cache_implementation": "static"})]:
    try:
        run(**kw); run(**kw)  # warm-up (and compilation)
        ts = []
        for _ in range(3):
            t = time.perf_counter(); run(**kw); ts.append(time.perf_counter() - t)
        ts.sort()
        print(f"hf {mode}: {128 / ts[1]:.1f} tok/s (median of 3, bf16, batch 1)", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on to the next mode
        print(f"hf {mode}: failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
