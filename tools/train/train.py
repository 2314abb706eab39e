#!/usr/bin/env python3
"""Train 1bit's demo models on the GPU machine: a BitNet b1.58 model (quantization-aware
training) and an F16 twin of the same size, on the corpus of build_corpus.py.

Owns, in one run: the byte-level BPE tokenizer (trained here with Hugging Face tokenizers), the
tokenized corpus, both models' training (one process, the two models step in turn on the very
same batches), the exported Hugging Face checkpoints, and their evaluation with transformers
(held-out perplexity by 1bit perplexity's method, greedy continuations, chat answers).
Does not own: the corpus (build_corpus.py), GGUF conversion (`1bit convert`, on the CPU machine).

    python3 tools/train/train.py --corpus build/corpus/out --out OUTDIR [--deadline 470]

--deadline is the second (from the start of this script) by which training must have ended;
the number of steps is fixed after timing the first steps (or given with --steps, for a rerun
with the same schedule). The seed fixes the tokenizer, the initialisation and every batch; the
GPU's kernels are not bitwise deterministic, so a rerun matches closely, not bit for bit.
The demo models (docs/demo-model.md) came from `--deadline 460`, which fixed 3028 steps and
stopped at step 2973 (20 s past the deadline); the same schedule again, without the timing:
`--steps 3028 --stop-at 2973 --deadline 100000`.

What comes out (OUTDIR): log.txt is written by the caller; train_log.csv (loss curve of both
models), results.json (everything measured), and the two checkpoints, tarred:
ckpt_ternary.tar.gz (BitNetForCausalLM, quantization_config autobitlinear/online, bf16 weights
that are exactly ternary * per-tensor scale: see project_ternary) and ckpt_twin.tar.gz
(LlamaForCausalLM, bf16), split into parts of at most 15 MiB where needed (*.partNN).
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tarfile
import time

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
BOS, EOT, IM_START, IM_END = 0, 1, 2, 3
# Llama 3's pre-tokenizer regex (1bit convert maps it to llama.cpp's "llama-bpe").
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
QUANT = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"}
SHAPE = dict(vocab_size=8192, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
             num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512,
             rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=[IM_END, EOT],
             pad_token_id=None, initializer_range=0.02, attention_bias=False, attention_dropout=0.0)
ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def chat_text(user, assistant=None):
    s = f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    return s if assistant is None else s + f"{assistant}<|im_end|>\n"


# ---------------------------------------------------------------------------------------------
# Tokenizer

def train_tokenizer(texts, vocab, outdir):
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, trainers, processors
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    assert tok.get_vocab_size() == vocab, tok.get_vocab_size()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIALS[BOS]} $A", pair=f"{SPECIALS[BOS]} $A {SPECIALS[BOS]}:1 $B:1",
        special_tokens=[(SPECIALS[BOS], BOS)])
    os.makedirs(outdir, exist_ok=True)
    tok.save(os.path.join(outdir, "tokenizer.json"))
    j = json.load(open(os.path.join(outdir, "tokenizer.json")))
    assert j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == LLAMA3_SPLIT
    tcfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[BOS],
        "eos_token": SPECIALS[IM_END],
        "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE["max_position_embeddings"],
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True} for i, s in enumerate(SPECIALS)},
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
    return tok


# ---------------------------------------------------------------------------------------------
# Models

def make_models(torch, transformers, seed):
    import torch.nn as nn
    import torch.nn.functional as F
    from transformers.integrations.bitnet import ActQuant, WeightQuant

    class QATLinear(nn.Linear):
        """AutoBitLinear(online_quant=True)'s forward, with transformers' own straight-through
        WeightQuant/ActQuant: the module keeps nn.Linear's parameters, so the saved state dict is
        a plain BitNet checkpoint."""

        def forward(self, x):
            return F.linear(ActQuant.apply(x), WeightQuant.apply(self.weight), self.bias)

    def cfg_of(cls_name, **extra):
        import inspect
        Cfg = getattr(transformers, cls_name)
        kw = dict(SHAPE, **extra)
        if "rope_parameters" in inspect.signature(Cfg.__init__).parameters or \
                "rope_parameters" in getattr(Cfg, "__dataclass_fields__", {}):
            cfg = Cfg(rope_parameters=dict(ROPE), **kw)
        else:
            cfg = Cfg(rope_theta=ROPE["rope_theta"], **kw)
        cfg._attn_implementation = "sdpa"
        return cfg

    torch.manual_seed(seed)
    tern = transformers.BitNetForCausalLM(cfg_of("BitNetConfig", hidden_act="relu2"))
    n_q = 0
    for name, m in tern.named_modules():
        if type(m) is nn.Linear and not name.endswith("lm_head"):
            m.__class__ = QATLinear
            n_q += 1
    torch.manual_seed(seed)
    twin = transformers.LlamaForCausalLM(cfg_of("LlamaConfig", hidden_act="silu", mlp_bias=False))
    return tern.cuda(), twin.cuda(), n_q, QATLinear


def n_params(m):
    seen, n = set(), 0
    for p in m.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def project_ternary(torch, W):
    """bf16 weights W' = t * v, t in {-1,0,1}, such that transformers' online WeightQuant of W'
    gives back exactly t, times a scale within bf16 rounding of the trained one.
    WeightQuant(W) = t / s with s = 1/mean|W|. With p = fraction of t that is non-zero and
    v = bf16(mean|W| / p): mean|W'| = v*p, W'*s' = t/p -> round+clamp -> t (1/p >= 1), so the
    effective weight is t * v*p ~= t * mean|W| (relative error <= 2^-8 from rounding v to bf16)."""
    Wf = W.float()
    m = Wf.abs().mean().clamp(min=1e-5)
    t = (Wf / m).round().clamp(-1, 1)
    p = t.abs().mean().clamp(min=1e-12)
    v = (m / p).to(torch.bfloat16).float()
    return (t * v).to(torch.bfloat16), t, float(m), float(v * p)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="build/corpus/out")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/train_work")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--deadline", type=float, default=470.0)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop after this many steps of a --steps schedule (a rerun of a run its deadline cut short)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr-ternary", type=float, default=3e-3)
    ap.add_argument("--lr-twin", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--no-dry-run", action="store_true")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    import transformers
    import tokenizers
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    R = {"seed": args.seed, "args": vars(args), "versions": {"torch": torch.__version__,
         "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
         "gpu": torch.cuda.get_device_name(0), "shape": SHAPE, "rope": ROPE}
    log("versions", R["versions"], R["gpu"])
    random.seed(args.seed)

    # ---- corpus
    def rjsonl(name):
        with gzip.open(os.path.join(args.corpus, name), "rt", encoding="utf-8") as f:
            return [json.loads(l) for l in f]
    train_docs = [d["text"] for d in rjsonl("train.jsonl.gz")]
    chat = rjsonl("chat.jsonl.gz")
    valid_text = open(os.path.join(args.corpus, "valid.txt"), encoding="utf-8").read()
    valid_docs = [d for d in rjsonl("valid.jsonl.gz")]
    R["corpus"] = {"train_docs": len(train_docs), "train_bytes": sum(len(t.encode()) for t in train_docs),
                   "chat_pairs": len(chat), "valid_bytes": len(valid_text.encode()),
                   "valid_sha256": hashlib.sha256(valid_text.encode()).hexdigest()}
    log("corpus", R["corpus"])

    # ---- tokenizer
    tokdir = os.path.join(args.work, "tokenizer")
    tok = train_tokenizer(train_docs, SHAPE["vocab_size"], tokdir)
    log("tokenizer trained")
    chat_texts = [chat_text(c["user"], c["assistant"]) for c in chat]
    seqs = [e.ids for e in tok.encode_batch(train_docs + chat_texts, add_special_tokens=False)]
    order = list(range(len(seqs)))
    random.Random(args.seed).shuffle(order)
    flat = []
    for i in order:
        flat.append(BOS)
        flat.extend(seqs[i])
        flat.append(EOT)
    data = torch.tensor(flat, dtype=torch.int32, device="cuda")
    n_doc_tokens = sum(len(seqs[i]) for i in range(len(train_docs)))
    vseqs = [e.ids for e in tok.encode_batch([d["text"] for d in valid_docs], add_special_tokens=False)]
    vflat = []
    for s in vseqs:
        vflat += [BOS] + s + [EOT]
    vdata = torch.tensor(vflat, dtype=torch.int32, device="cuda")
    valid_ids = tok.encode(valid_text, add_special_tokens=False).ids
    R["tokens"] = {"train_total": len(flat), "train_doc_tokens": n_doc_tokens,
                   "chat_tokens": len(flat) - n_doc_tokens - 2 * len(seqs),
                   "train_bytes_per_token": R["corpus"]["train_bytes"] / max(1, n_doc_tokens),
                   "valid_txt_tokens": len(valid_ids),
                   "valid_bytes_per_token": R["corpus"]["valid_bytes"] / max(1, len(valid_ids))}
    log("tokens", R["tokens"])

    T = SHAPE["max_position_embeddings"]
    B = args.batch
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    ar = torch.arange(T + 1, device="cuda")

    def batch_at(src, starts):
        idx = starts.to("cuda")[:, None] + ar[None, :]
        w = src[idx].long()
        return w[:, :-1], w[:, 1:]

    def next_batch():
        return batch_at(data, torch.randint(0, len(flat) - T - 1, (B,), generator=gen))

    vstarts = torch.linspace(0, len(vflat) - T - 2, 32).long()
    vx, vy = batch_at(vdata, vstarts)

    @torch.no_grad()
    def val_loss(model):
        model.eval()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(input_ids=vx, use_cache=False).logits
        model.train()
        return F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), vy.reshape(-1)).item()

    def optimizer(model, lr):
        dec = [p for n, p in model.named_parameters() if p.dim() >= 2]
        nod = [p for n, p in model.named_parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": dec, "weight_decay": args.wd}, {"params": nod, "weight_decay": 0.0}],
                                 lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def lr_at(step, total, peak):
        if step < args.warmup:
            return peak * (step + 1) / args.warmup
        prog = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
        return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))

    def step_model(model, opt, lr, x, y):
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y.reshape(-1))
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), gn.detach()

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    # ---- dry run of the whole pipeline on a few steps, so a mistake costs seconds, not the run
    if not args.no_dry_run:
        tern, twin, _, QATLinear = make_models(torch, transformers, args.seed)
        ot, of = optimizer(tern, 1e-4), optimizer(twin, 1e-4)
        for s in range(3):
            x, y = next_batch()
            step_model(tern, ot, 1e-4, x, y)
            step_model(twin, of, 1e-4, x, y)
        try:
            finalize(torch, transformers, args, R, tern, twin, QATLinear, tokdir, tok, valid_ids, valid_docs,
                     os.path.join(args.work, "dry"), dry=True)
        except EvalError:  # training and saving work: train anyway, the checkpoints will come back
            R["dry_run_evaluation_failed"] = True
        del tern, twin, ot, of
        torch.cuda.empty_cache()
        gen.manual_seed(args.seed)  # the real run sees the same batches as a run without the dry run
        log("dry run passed")

    # ---- training
    tern, twin, n_q, QATLinear = make_models(torch, transformers, args.seed)
    R["params"] = {"ternary": n_params(tern), "twin": n_params(twin), "ternary_quantized_linears": n_q,
                   "ternary_linear_weights": sum(m.weight.numel() for m in tern.modules() if isinstance(m, QATLinear))}
    log("params", R["params"])
    ot, of = optimizer(tern, args.lr_ternary), optimizer(twin, args.lr_twin)
    csv = open(os.path.join(args.out, "train_log.csv"), "w")
    csv.write("step,tokens,elapsed_s,lr_ternary,lr_twin,train_loss_ternary,train_loss_twin,"
              "val_loss_ternary,val_loss_twin,grad_norm_ternary,grad_norm_twin\n")
    total = args.steps if args.steps > 0 else 10 ** 9
    acc_t = acc_f = gn_t = gn_f = None
    n_acc = 0
    t_train0 = time.time()
    t_probe = None
    step = 0
    log_every = 25
    while step < total:
        if step == 10:
            torch.cuda.synchronize()
            t_probe = time.time()
        if step == 60 and args.steps <= 0:
            torch.cuda.synchronize()
            per = (time.time() - t_probe) / 50
            left = args.deadline - (time.time() - T0)
            total = 60 + int(left / per * 0.97)
            R["timing"] = {"s_per_step_pair": per, "steps": total}
            log(f"{per * 1000:.1f} ms per step (both models): {total} steps in all")
        if args.stop_at and step >= args.stop_at:
            break
        if time.time() - T0 > args.deadline + 20:
            log("past the deadline: stopping early at step", step)
            break
        x, y = next_batch()
        lt, lf = lr_at(step, total, args.lr_ternary), lr_at(step, total, args.lr_twin)
        a, ga = step_model(tern, ot, lt, x, y)
        b, gb = step_model(twin, of, lf, x, y)
        acc_t = a if acc_t is None else acc_t + a
        acc_f = b if acc_f is None else acc_f + b
        gn_t = ga if gn_t is None else gn_t + ga
        gn_f = gb if gn_f is None else gn_f + gb
        n_acc += 1
        step += 1
        if step % log_every == 0 or step == total:
            vt = vf = ""
            if step % args.eval_every == 0 or step == total:
                vt, vf = f"{val_loss(tern):.5f}", f"{val_loss(twin):.5f}"
            csv.write(f"{step},{step * B * T},{time.time() - t_train0:.2f},{lt:.6g},{lf:.6g},"
                      f"{(acc_t / n_acc).item():.5f},{(acc_f / n_acc).item():.5f},{vt},{vf},"
                      f"{(gn_t / n_acc).item():.4f},{(gn_f / n_acc).item():.4f}\n")
            csv.flush()
            if step % 200 == 0 or step == total:
                log(f"step {step}/{total} loss ternary {(acc_t / n_acc).item():.4f} twin {(acc_f / n_acc).item():.4f}"
                    f" val {vt} {vf}")
            acc_t = acc_f = gn_t = gn_f = None
            n_acc = 0
    torch.cuda.synchronize()
    train_s = time.time() - t_train0
    R["training"] = {"steps": step, "batch": B, "ctx": T, "tokens_per_model": step * B * T,
                     "epochs_over_train_tokens": step * B * T / len(flat), "wall_s_both_models": train_s,
                     "lr_ternary": args.lr_ternary, "lr_twin": args.lr_twin, "warmup": args.warmup,
                     "weight_decay": args.wd, "schedule": "linear warmup, cosine to 10% of peak",
                     "optimizer": "AdamW(0.9, 0.95), grad clip 1.0, bf16 autocast, fp32 master weights"}
    log("training done", R["training"])
    csv.close()
    finalize(torch, transformers, args, R, tern, twin, QATLinear, tokdir, tok, valid_ids, valid_docs,
             os.path.join(args.work, "final"), dry=False)
    log("all done")


def finalize(torch, transformers, args, R, tern, twin, QATLinear, tokdir, tok, valid_ids, valid_docs, wdir, dry):
    import torch.nn as nn
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shutil.rmtree(wdir, ignore_errors=True)
    dt, df = os.path.join(wdir, "ternary"), os.path.join(wdir, "twin")
    res = {}
    T = SHAPE["max_position_embeddings"]
    tern.eval()
    twin.eval()

    # Master-weight ternary model's validation numbers, before the projection (fp32, no autocast).
    vwin = torch.tensor(valid_ids[: (len(valid_ids) // (T - 1)) * (T - 1)][: 4 * (T - 1)], device="cuda")
    probe = torch.cat([torch.full((vwin.numel() // (T - 1), 1), BOS, device="cuda"), vwin.view(-1, T - 1)], 1)
    with torch.no_grad():
        lg_master = tern(input_ids=probe).logits.float()

    # ---- twin: bf16 LlamaForCausalLM
    twin.to(torch.bfloat16).save_pretrained(df)
    # ---- ternary: project the fp32 master weights, then a plain bf16 BitNet checkpoint
    proj = {}
    with torch.no_grad():
        for name, m in tern.named_modules():
            if isinstance(m, QATLinear):
                Wp, t, mean_abs, eff = project_ternary(torch, m.weight)
                m.weight.copy_(Wp.float())
                proj[name] = {"mean_abs": mean_abs, "effective_scale": eff,
                              "frac_zero": float((t == 0).float().mean())}
        lg_proj_mem = tern(input_ids=probe).logits.float()
    for m in tern.modules():
        if isinstance(m, QATLinear):
            m.__class__ = nn.Linear
    tern.config.quantization_config = dict(QUANT)
    tern.to(torch.bfloat16).save_pretrained(dt)
    for d in (dt, df):
        cp = os.path.join(d, "config.json")
        cj = json.load(open(cp))
        if d == dt and "quantization_config" not in cj:
            cj["quantization_config"] = dict(QUANT)
        cj["eos_token_id"] = SHAPE["eos_token_id"]
        with open(cp, "w") as f:
            json.dump(cj, f, indent=2, sort_keys=True)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokdir, fn), os.path.join(d, fn))
    res["projection"] = {"max_rel_scale_change": max(abs(v["effective_scale"] / v["mean_abs"] - 1) for v in proj.values()),
                         "mean_frac_zero": sum(v["frac_zero"] for v in proj.values()) / len(proj),
                         "per_tensor": proj if not dry else {}}
    for d in (dt, df):
        res.setdefault("sha256", {})[os.path.basename(d)] = hashlib.sha256(
            open(os.path.join(d, "model.safetensors"), "rb").read()).hexdigest()
    log("saved", os.listdir(dt), os.listdir(df))

    # ---- pack first, so the checkpoints come back even if an evaluation below fails.
    # Each file at most 15 MiB (the return path takes 8 files of 16 MiB).
    def pack(d, name, mode):
        path = os.path.join(wdir, name)
        with tarfile.open(path, mode) as tf:
            for fn in sorted(os.listdir(d)):
                tf.add(os.path.join(d, fn), arcname=os.path.join(os.path.basename(d), fn))
        size, lim = os.path.getsize(path), 15 * 1024 * 1024
        parts = []
        with open(path, "rb") as f:
            i = 0
            while True:
                b = f.read(lim)
                if not b:
                    break
                pn = name if size <= lim else f"{name}.part{i:02d}"
                with open(os.path.join(args.out, pn), "wb") as g:
                    g.write(b)
                parts.append(pn)
                i += 1
        R.setdefault("packed", {})[name] = {"bytes": size, "parts": parts,
                                            "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest()}
        log("packed", name, size, parts)

    def write_results():
        if not dry:
            R.update(res)
            with open(os.path.join(args.out, "results.json"), "w") as f:
                json.dump(R, f, indent=1)
    if not dry:
        pack(dt, "ckpt_ternary.tar.gz", "w:gz")
        pack(df, "ckpt_twin.tar.gz", "w:gz")
        write_results()

    import traceback
    try:
        evaluate(torch, transformers, res, dt, df, probe, lg_master, lg_proj_mem, tok, valid_ids, valid_docs, dry)
    except Exception:  # noqa: BLE001 - keep what was measured; the traceback says what failed
        res.setdefault("errors", []).append(traceback.format_exc())
        log("evaluation failed:\n" + traceback.format_exc())
        if dry:
            raise EvalError("dry-run evaluation failed")
    write_results()


class EvalError(Exception):
    pass


def evaluate(torch, transformers, res, dt, df, probe, lg_master, lg_proj_mem, tok, valid_ids, valid_docs, dry):
    import torch.nn.functional as F
    T = SHAPE["max_position_embeddings"]

    # ---- reload both with transformers, float32
    mt = transformers.BitNetForCausalLM.from_pretrained(dt, dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
    mf = transformers.LlamaForCausalLM.from_pretrained(df, dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
    kinds = {}
    for m in mt.modules():
        k = type(m).__name__ + ("(online)" if getattr(m, "online_quant", False) else "")
        kinds[k] = kinds.get(k, 0) + 1
    res["ternary_loaded_modules"] = {k: v for k, v in kinds.items() if "Linear" in k}
    assert kinds.get("AutoBitLinear(online)", 0) == 7 * SHAPE["num_hidden_layers"], kinds
    with torch.no_grad():
        lg_loaded = mt(input_ids=probe).logits.float()

    def ce(lg):
        return F.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]), probe[:, 1:].reshape(-1)).item()
    res["ternary_check"] = {
        "probe_tokens": int(probe.numel()),
        "loaded_vs_inmemory_projected_max_abs_logit_diff": (lg_loaded - lg_proj_mem).abs().max().item(),
        "loaded_vs_inmemory_argmax_agree": (lg_loaded.argmax(-1) == lg_proj_mem.argmax(-1)).float().mean().item(),
        "ce_master": ce(lg_master), "ce_projected_inmemory": ce(lg_proj_mem), "ce_loaded": ce(lg_loaded)}
    log("ternary check", res["ternary_check"])

    # ---- held-out perplexity, exactly as `1bit perplexity` cuts the text: chunks of T-1 tokens,
    # BOS first; default scores the second half, --score-all every token after the first.
    per = T - 1
    n_chunks = len(valid_ids) // per
    if dry:
        n_chunks = min(n_chunks, 2)
    ids = torch.tensor(valid_ids[: n_chunks * per], device="cuda").view(n_chunks, per)
    chunks = torch.cat([torch.full((n_chunks, 1), BOS, device="cuda"), ids], 1)

    @torch.no_grad()
    def ppl(model):
        half, allv = [], []
        for i in range(0, n_chunks, 16):
            c = chunks[i:i + 16]
            lp = torch.log_softmax(model(input_ids=c, use_cache=False).logits.double(), -1)
            tl = lp[:, :-1].gather(-1, c[:, 1:, None]).squeeze(-1)  # [b, T-1]: log p(c[k+1] | c[..k])
            allv += (-tl.sum(1)).tolist()
            half += (-tl[:, T // 2 - 1:].sum(1)).tolist()
        nh, na = T - T // 2, T - 1
        return {"chunks": n_chunks, "n_ctx": T,
                "default": {"tokens_scored": nh * n_chunks, "nll": sum(half) / (nh * n_chunks),
                            "ppl": math.exp(sum(half) / (nh * n_chunks)), "per_chunk_nll_sum": half},
                "score_all": {"tokens_scored": na * n_chunks, "nll": sum(allv) / (na * n_chunks),
                              "ppl": math.exp(sum(allv) / (na * n_chunks)), "per_chunk_nll_sum": allv}}
    res["perplexity"] = {"ternary": ppl(mt), "twin": ppl(mf)}
    log("ppl ternary", res["perplexity"]["ternary"]["default"]["ppl"], res["perplexity"]["ternary"]["score_all"]["ppl"],
        "twin", res["perplexity"]["twin"]["default"]["ppl"], res["perplexity"]["twin"]["score_all"]["ppl"])

    # ---- greedy continuations of held-out text and chat answers
    from transformers import AutoTokenizer
    atok = AutoTokenizer.from_pretrained(dt)
    prompts, seen_src = [], set()
    for d in sorted(valid_docs, key=lambda d: hashlib.sha256(d["path"].encode()).hexdigest()):
        if d["src"] in seen_src:
            continue
        for para in d["text"].split("\n\n"):
            w = para.split()
            if len(w) >= 24 and para[0].isupper():
                prompts.append(" ".join(w[:14]))
                seen_src.add(d["src"])
                break
        if len(prompts) == 5:
            break
    questions = ["What is PostgreSQL?", "Tell me about Python lists.", "Explain the HTTP server."]
    n_new = 4 if dry else 48
    gens = []
    for kind, text in [("text", p) for p in prompts] + [("chat", q) for q in questions]:
        if kind == "chat":
            rendered = atok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                add_generation_prompt=True)
            res["chat_template_matches_training_format"] = rendered == chat_text(text)
            pid = tok.encode(rendered).ids
        else:
            pid = tok.encode(text).ids
        assert pid[0] == BOS
        hf_ids = atok(rendered if kind == "chat" else text)["input_ids"]
        entry = {"kind": kind, "prompt": text, "prompt_ids": pid, "hf_tokenizer_ids_match": hf_ids == pid}
        for name, m in (("ternary", mt), ("twin", mf)):
            with torch.no_grad():
                out = m.generate(torch.tensor([pid], device="cuda"), max_new_tokens=n_new if kind == "text" else 2 * n_new,
                                 do_sample=False, eos_token_id=[IM_END, EOT], pad_token_id=EOT)
            new = out[0, len(pid):].tolist()
            entry[name] = {"ids": new, "text": tok.decode(new, skip_special_tokens=False)}
        gens.append(entry)
        if not dry:
            log(f"[{kind}] {text!r}\n   ternary: {entry['ternary']['text']!r}\n   twin:    {entry['twin']['text']!r}")
    res["generations"] = gens
    del mt, mf
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
