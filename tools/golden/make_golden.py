#!/usr/bin/env python3
"""Make the golden reference data for 1bit's forward pass.

Run on a machine with torch + transformers + tokenizers + safetensors:

    python3 tools/golden/make_golden.py OUTDIR            # writes OUTDIR/<arch>/...
    python3 tools/golden/make_golden.py --check-compiled OUTDIR
        (optional: re-runs the bitnet model with transformers' torch.compile'd
         quant functions enabled and prints the difference to the stored logits)
    python3 tools/golden/make_golden.py --aq-codes OUTDIR
        (same output as without the option, plus, for the bitnet model only,
         aq_codes.i8 and aq_absmax.f32 and their entries in meta.json "files":
         the int8 codes of ActQuant at the input of every AutoBitLinear, captured
         during the very forward pass that produces logits.f32; see
         BITNET_NOTES.md "Activation-quant codes")

For each architecture a tiny random-weight model is built from a config with a
fixed seed, its weights are rounded to the storage dtype (F16, or BF16 for
bitnet) FIRST, saved with save_pretrained, reloaded from disk in float32, and
the logits of one forward pass over the 24 tokens of tokens.json are computed
on the CPU in float32 with attn_implementation="eager".  So the stored
model.safetensors is exactly the model the logits belong to.

Files per folder: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, tokens.json, logits.f32 ([n_tokens][n_vocab] LE f32),
hidden.f32 ([n_layers][n_tokens][hidden] LE f32: the residual stream after each
decoder layer, before the final norm), meta.json.
Also OUTDIR/tokenizer_check.json: HF tokenizer ids of a few strings and a
rendered chat template (an oracle for the C tokenizer).
"""
import json
import math
import os
import struct
import sys

SEED = 1234
N_TOKENS = 24
VOCAB = 320
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
BOS_ID = 318
EOS_ID = 319

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog does not move; it sleeps in the warm sun
by the door of the old house, and the fox runs on into the green field beyond the river.
Once upon a time there was a small town at the edge of a great forest. In the town lived a
baker, a smith, a teacher and a young girl who wanted to see the world. Every morning the baker
made bread for the whole town, and the smell of fresh bread filled the streets before the sun
was up. The smith worked iron in his shop, and the sound of his hammer was the second thing
that people heard each day. The teacher opened the school at eight, and the children came in
from the farms and the houses, some of them still half asleep.
The girl, whose name was Anna, liked to sit on the wall by the river and watch the boats go
by. She asked the men on the boats where they were going, and they told her about cities
with tall towers, markets full of spices, and seas so wide that you could sail for a month
without seeing land. She wrote everything down in a little book that she kept in her pocket.
One day a stranger came to the town. He was tall and thin, and he carried a heavy bag on his
back. He said that he was a maker of maps, and that he had walked from the mountains in the
north to draw the roads and rivers of the land. Anna asked him if she could see his maps. He
opened the bag and took out a roll of paper, and on the paper were lines and names and small
drawings of hills, trees, bridges and towns. She had never seen anything so beautiful.
"How do you know where the roads go?" she asked. "I walk them," he said. "I count my steps,
I look at the sun and the stars, and I write down what I see. It is slow work, but it is
honest work, and a good map can help a traveller for a hundred years."
Language models read text as a sequence of tokens. A tokenizer splits the text into pieces,
and each piece has a number. The model then predicts the next number from the ones before it.
Byte pair encoding starts from single bytes and merges the most frequent pairs again and again,
so common words become single tokens while rare words are spelled out in smaller parts.
Numbers like 2024, 3.14159 and 1,000,000 are split into digits and punctuation, and text in
other scripts, such as na\u00efve caf\u00e9 or \u00fcber, falls back to raw bytes when no merge applies.
Good tests use small inputs, fixed seeds and exact reference outputs. If the program is
correct, the numbers match; if it is wrong, the test shows where the first difference is.
Then the engineer can fix the bug, run the tests again, and move on to the next problem.
In the evening the town grew quiet. The baker went to bed early, the smith closed his shop,
and the teacher read by the light of a lamp. Anna sat at her window and looked at the stars,
thinking about roads and rivers and the cities at the end of them. Some day, she thought,
she would walk those roads herself, and she would make her own map of the world.
"""

TOKENS_TEXT = "The quick brown fox jumps over the lazy dog. The dog sleeps, the fox runs: 3.14!"

# Architectures -------------------------------------------------------------

COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
    max_position_embeddings=256, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
    hidden_act="silu",
)

ARCHS = [
    dict(name="llama", cls="LlamaForCausalLM", cfg_cls="LlamaConfig", store="float16",
         cfg=dict(COMMON, tie_word_embeddings=False),
         rope=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=64),
         std=dict(embed=0.2, linear=0.08, qk=0.2, bias=0.0)),
    dict(name="mistral", cls="MistralForCausalLM", cfg_cls="MistralConfig", store="float16",
         cfg=dict(COMMON, tie_word_embeddings=False, sliding_window=None, head_dim=16),
         rope=dict(rope_type="default", rope_theta=10000.0),
         std=dict(embed=0.2, linear=0.08, qk=0.2, bias=0.0)),
    dict(name="qwen2", cls="Qwen2ForCausalLM", cfg_cls="Qwen2Config", store="float16",
         cfg=dict(COMMON, tie_word_embeddings=True, use_sliding_window=False),
         rope=dict(rope_type="default", rope_theta=1000000.0),
         std=dict(embed=0.2, linear=0.08, qk=0.2, bias=0.2)),
    dict(name="qwen3", cls="Qwen3ForCausalLM", cfg_cls="Qwen3Config", store="float16",
         cfg=dict(COMMON, tie_word_embeddings=True, head_dim=32, attention_bias=False,
                  use_sliding_window=False),
         rope=dict(rope_type="default", rope_theta=1000000.0),
         std=dict(embed=0.2, linear=0.08, qk=0.2, bias=0.0)),
    dict(name="bitnet", cls="BitNetForCausalLM", cfg_cls="BitNetConfig", store="bfloat16",
         cfg=dict(COMMON, hidden_size=256, intermediate_size=512, hidden_act="relu2",
                  tie_word_embeddings=True),
         rope=dict(rope_type="default", rope_theta=500000.0),
         std=dict(embed=0.1, linear=0.05, qk=0.15, bias=0.0),
         quant=dict(quant_method="bitnet", linear_class="autobitlinear", quantization_mode="online")),
]


def log(*a):
    print(*a, flush=True)


# Tokenizer ------------------------------------------------------------------

def build_tokenizer(outdir):
    from tokenizers import Tokenizer, AddedToken, models, pre_tokenizers, decoders, trainers, processors
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 2, min_frequency=1, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT.splitlines(keepends=True), trainer=trainer)
    assert tok.get_vocab_size(with_added_tokens=False) == VOCAB - 2, tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(BOS, special=True, normalized=False),
                            AddedToken(EOS, special=True, normalized=False)])
    assert tok.token_to_id(BOS) == BOS_ID and tok.token_to_id(EOS) == EOS_ID
    assert tok.get_vocab_size(with_added_tokens=True) == VOCAB
    # Like Llama 3: ByteLevel offsets + prepend BOS on encode.
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1",
            special_tokens=[(BOS, BOS_ID)]),
    ])
    path = os.path.join(outdir, "tokenizer.json")
    tok.save(path)
    tcfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 256,
        "added_tokens_decoder": {
            str(BOS_ID): {"content": BOS, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True},
            str(EOS_ID): {"content": EOS, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True},
        },
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
    return tok


def make_tokens(tok):
    ids = tok.encode(TOKENS_TEXT).ids  # starts with BOS (post-processor)
    assert ids[0] == BOS_ID
    ids = ids[:N_TOKENS]
    x = 12345
    while len(ids) < N_TOKENS:  # deterministic filler, should not be needed
        x = (x * 1103515245 + 12345) % (1 << 31)
        ids.append(x % (VOCAB - 2))
    assert len(ids) == N_TOKENS and all(0 <= i < VOCAB for i in ids)
    if len(set(ids)) == N_TOKENS:  # make sure there is a repeat
        ids[-1] = ids[1]
    return ids


def tokenizer_check(tokdir, outpath):
    """Oracle data for the C tokenizer, from transformers' own loader."""
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(tokdir)
    samples = ["Hello world", " hello  world\n\nthe end", TOKENS_TEXT,
               "na\u00efve caf\u00e9 \u00fcber \u65e5\u672c \U0001F600", "1,000,000 and 3.14159",
               BOS + "x" + EOS, ""]
    out = {"samples": []}
    for s in samples:
        ids = t(s)["input_ids"]
        ids_nospecial = t(s, add_special_tokens=False)["input_ids"]
        out["samples"].append({"text": s, "ids_with_special": ids, "ids": ids_nospecial,
                               "decoded": t.decode(ids_nospecial)})
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi there!"}]
    rendered = t.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    out["chat"] = {"messages": msgs, "add_generation_prompt": True, "rendered": rendered,
                   "ids": t(rendered, add_special_tokens=False)["input_ids"]}
    with open(outpath, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    log("tokenizer check: chat rendered =", repr(rendered))


# Models ---------------------------------------------------------------------

def make_config(transformers, arch):
    import inspect
    Cfg = getattr(transformers, arch["cfg_cls"])
    kw = dict(arch["cfg"])
    rope = dict(arch["rope"])
    params = inspect.signature(Cfg.__init__).parameters
    fields = getattr(Cfg, "__dataclass_fields__", {})
    if "rope_parameters" in params or "rope_parameters" in fields:
        cfg = Cfg(rope_parameters=rope, **kw)
    else:
        legacy = dict(kw, rope_theta=rope.pop("rope_theta"))
        if rope.get("rope_type", "default") != "default":
            legacy["rope_scaling"] = rope
        cfg = Cfg(**legacy)
    cfg._attn_implementation = "eager"
    return cfg


def expected_inv_freq(arch, head_dim):
    """Our own float64 formula (default + llama3), compared against transformers' buffer."""
    rope = arch["rope"]
    base = rope["rope_theta"]
    inv = [1.0 / (base ** (i / head_dim)) for i in range(0, head_dim, 2)]
    if rope["rope_type"] == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < hi_wl:
                out.append(f)
            elif wl > lo_wl:
                out.append(f / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        inv = out
    return inv


def init_weights(torch, model, arch, gen):
    std = arch["std"]
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or "_norm" in name:
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name or name == "lm_head.weight":
                v = std["embed"] * torch.randn(p.shape, generator=gen)
            elif name.endswith(".bias"):
                v = std["bias"] * torch.randn(p.shape, generator=gen)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                v = std["qk"] * torch.randn(p.shape, generator=gen)
            elif name.endswith("proj.weight"):
                v = std["linear"] * torch.randn(p.shape, generator=gen)
            else:
                raise RuntimeError("uninitialised parameter " + name)
            p.copy_(v.to(p.dtype))
            n += 1
    return n


def safetensors_dtypes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in hdr.items() if k != "__metadata__"}


def build_one(transformers, torch, arch, outdir, tokens, aq_codes=False):
    name = arch["name"]
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    store = getattr(torch, arch["store"])
    cfg = make_config(transformers, arch)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    Model = getattr(transformers, arch["cls"])
    model = Model(cfg).to(torch.float32).eval()
    n = init_weights(torch, model, arch, gen)
    # Round the weights to the storage dtype FIRST.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(store).to(torch.float32))
    if arch.get("quant"):
        model.config.quantization_config = dict(arch["quant"])
    model.to(store).save_pretrained(d)
    cpath = os.path.join(d, "config.json")
    with open(cpath) as f:
        cj = json.load(f)
    if arch.get("quant") and "quantization_config" not in cj:
        log(f"[{name}] save_pretrained dropped quantization_config; inserting it into config.json")
        cj["quantization_config"] = dict(arch["quant"])
        with open(cpath, "w") as f:
            json.dump(cj, f, indent=2, sort_keys=True)
    log(f"[{name}] initialised {n} tensors; config.json:\n" + json.dumps(cj, sort_keys=True))
    ref_sd = {k: v.detach().to(torch.float32).clone() for k, v in model.to(torch.float32).state_dict().items()}
    del model

    # Reload the stored file in float32: this is the model the logits belong to.
    loaded, how = load_f32(transformers, torch, Model, d, arch)
    loaded.eval()
    # Check all weights are exactly the rounded ones.
    sd = loaded.state_dict()
    for k, v in ref_sd.items():
        if k not in sd:
            log(f"[{name}] note: {k} not in reloaded state_dict")
            continue
        if sd[k].dtype != torch.float32 or not torch.equal(sd[k].float(), v):
            raise RuntimeError(f"[{name}] reloaded {k} differs / dtype {sd[k].dtype}")
    types = {}
    for mn, m in loaded.named_modules():
        if isinstance(m, torch.nn.Linear):
            t = type(m).__name__
            if hasattr(m, "online_quant"):
                t += f"(online_quant={m.online_quant})"
            types.setdefault(t, []).append(mn)
    for t, lst in types.items():
        log(f"[{name}] {t}: {len(lst)} modules, e.g. {lst[:3]} ... {lst[-1]}")
    if arch.get("quant"):
        abl = types.get("AutoBitLinear(online_quant=True)", [])
        if len(abl) != 7 * cfg.num_hidden_layers:
            raise RuntimeError(f"[{name}] expected {7 * cfg.num_hidden_layers} online AutoBitLinear, got {types}")
        if any("lm_head" in x for x in abl):
            raise RuntimeError("lm_head was quantized")
    tied = loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    log(f"[{name}] loaded via {how}; lm_head tied to embed_tokens: {tied}; "
        f"attn impl: {loaded.config._attn_implementation}")

    # RoPE check against our own formula.
    rot = loaded.model.rotary_emb
    inv = rot.inv_freq.detach().double().tolist()
    head_dim = getattr(loaded.config, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    exp = expected_inv_freq(arch, head_dim)
    rdiff = max(abs(a - b) / b for a, b in zip(inv, exp))
    log(f"[{name}] inv_freq (transformers) = {inv}; max rel diff vs our formula = {rdiff:.3e}; "
        f"attention_scaling = {getattr(rot, 'attention_scaling', None)}")
    if len(inv) != head_dim // 2 or rdiff > 1e-5:
        raise RuntimeError(f"[{name}] rope mismatch")

    aq = None
    if aq_codes and arch.get("quant"):
        # Same forward pass as always; the capture only records (hooks + a pass-through
        # wrapper around ActQuant.apply), it changes no arithmetic.
        with ActQuantCapture(torch, loaded) as cap:
            logits, hidden = forward(torch, loaded, tokens)
        aq = aq_codes_from_capture(torch, cap, cfg, len(tokens), name)
    else:
        logits, hidden = forward(torch, loaded, tokens)
    nl = cfg.num_hidden_layers
    if aq is not None:
        codes, absmax = aq
        with open(os.path.join(d, "aq_codes.i8"), "wb") as f:
            f.write(codes.numpy().astype("i1").tobytes())
        with open(os.path.join(d, "aq_absmax.f32"), "wb") as f:
            f.write(absmax.numpy().astype("<f4").tobytes())
        log(f"[{name}] wrote aq_codes.i8 ({codes.numel()} bytes) and aq_absmax.f32 "
            f"({absmax.numel()} rows)")
    with open(os.path.join(d, "logits.f32"), "wb") as f:
        f.write(logits.numpy().astype("<f4").tobytes())
    with open(os.path.join(d, "hidden.f32"), "wb") as f:
        f.write(hidden.numpy().astype("<f4").tobytes())
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump({"tokens": tokens}, f)
    maxabs = float(logits.abs().max())
    meta = {
        "arch": name, "class": arch["cls"], "n_tokens": len(tokens), "n_vocab": int(logits.shape[1]),
        "n_layers": nl, "hidden_size": cfg.hidden_size, "weights_dtype": arch["store"],
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "max_abs_logit": maxabs, "logits_std": float(logits.std()),
        "argmax": logits.argmax(-1).tolist(),
        "seed": SEED, "init_std": arch["std"], "attn_implementation": "eager",
        "compute": "cpu float32, weights reloaded from model.safetensors",
        "rope": arch["rope"], "rope_inv_freq": inv,
        "files": {"logits.f32": "[n_tokens][n_vocab] little-endian float32",
                  "hidden.f32": "[n_layers][n_tokens][hidden_size] little-endian float32, residual "
                                "stream after each decoder layer (before final norm)"},
        "loaded_via": how, "linear_types": {t: len(v) for t, v in types.items()},
    }
    if aq is not None:
        meta["files"].update(AQ_FILES)
    if arch.get("quant"):
        meta["quantization_config"] = arch["quant"]
        meta["quant_functions"] = "eager (torch._dynamo disabled)"
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    st = safetensors_dtypes(os.path.join(d, "model.safetensors"))
    log(f"[{name}] safetensors dtypes: {sorted(set(st.values()))}, {len(st)} tensors; "
        f"max|logit| = {maxabs:.4f}, std = {meta['logits_std']:.4f}, argmax = {meta['argmax']}")
    want = {"float16": "F16", "bfloat16": "BF16"}[arch["store"]]
    assert set(st.values()) == {want}, st
    if not (0.5 < maxabs < 30):
        log(f"[{name}] WARNING: max|logit| {maxabs} out of the intended range")


# Activation-quant codes (bitnet, --aq-codes) --------------------------------

AQ_FILES = {
    "aq_codes.i8": "int8 codes q = clamp(round(x*s), -128, 127) that ActQuant computes (s = 127/max(max|x_row|, "
                   "1e-5), fp32) at the input x of every AutoBitLinear, from the same forward pass as logits.f32. "
                   "Row-major int8 blocks, for layer l = 0..n_layers-1 in this order: q_proj input "
                   "[n_tokens][hidden_size] (k_proj and v_proj see the same input), o_proj input "
                   "[n_tokens][num_attention_heads*head_dim] (attn_sub_norm output), gate_proj input "
                   "[n_tokens][hidden_size] (up_proj sees the same input), down_proj input "
                   "[n_tokens][intermediate_size] (ffn_sub_norm output)",
    "aq_absmax.f32": "[n_layers*4*n_tokens] little-endian float32: max_j |x_j| of each row of aq_codes.i8, same "
                     "order, BEFORE the clamp to 1e-5 (ActQuant's s = 127 * (1/max(absmax, 1e-5)), see "
                     "BITNET_NOTES.md)",
}
# Which module's input each block holds, and which other modules must see the same input.
AQ_ORDER = ["q_proj", "o_proj", "gate_proj", "down_proj"]
AQ_SAME = {"q_proj": ["k_proj", "v_proj"], "o_proj": [], "gate_proj": ["up_proj"], "down_proj": []}


def bits_equal(torch, a, b):
    """Bit-exact equality of two float32 tensors (so -0.0 != +0.0 and NaN == same NaN)."""
    return (a.shape == b.shape and a.dtype == b.dtype == torch.float32
            and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


class ActQuantCapture:
    """Records, for every AutoBitLinear call of one forward pass: the input the module got
    (forward pre-hook), the tensor ActQuant.apply got and what it returned (a pass-through
    wrapper put in place of the ActQuant that AutoBitLinear.forward looks up), and the
    module's output (forward hook).  Nothing is computed differently."""

    def __init__(self, torch, model):
        self.torch = torch
        self.model = model
        self.rec = {}        # module name -> {"x", "x_aq", "xq", "y", "mod"}
        self.cur = None
        self.handles = []
        self.globs = None
        self.orig = None

    def __enter__(self):
        mods = [(n, m) for n, m in self.model.named_modules() if type(m).__name__ == "AutoBitLinear"]
        if not mods:
            raise RuntimeError("no AutoBitLinear modules to capture")
        fwd = type(mods[0][1]).forward
        self.globs = fwd.__globals__
        self.orig = self.globs.get("ActQuant")
        if self.orig is None or not hasattr(self.orig, "apply"):
            raise RuntimeError(f"AutoBitLinear.forward ({fwd.__module__}) does not look up a global ActQuant")
        cap = self
        orig = self.orig

        class ActQuantRecorder:
            @staticmethod
            def apply(x):
                out = orig.apply(x)
                if cap.cur is None:
                    raise RuntimeError("ActQuant.apply called outside an AutoBitLinear forward")
                r = cap.rec[cap.cur]
                if "xq" in r:
                    raise RuntimeError(f"ActQuant.apply called twice in {cap.cur}")
                r["x_aq"] = x.detach().clone()
                r["xq"] = out.detach().clone()
                return out

        def pre(name):
            def hook(mod, inp):
                if name in cap.rec:
                    raise RuntimeError(f"{name} called twice in one forward")
                if len(inp) != 1:
                    raise RuntimeError(f"{name}: expected one positional input, got {len(inp)}")
                cap.rec[name] = {"x": inp[0].detach().clone(), "mod": mod}
                cap.cur = name
            return hook

        def post(name):
            def hook(mod, inp, out):
                cap.rec[name]["y"] = out.detach().clone()
                cap.cur = None
            return hook

        self.globs["ActQuant"] = ActQuantRecorder
        for n, m in mods:
            self.handles.append(m.register_forward_pre_hook(pre(n)))
            self.handles.append(m.register_forward_hook(post(n)))
        return self

    def __exit__(self, *exc):
        self.globs["ActQuant"] = self.orig
        for h in self.handles:
            h.remove()
        return False


def aq_codes_from_capture(torch, cap, cfg, n_tokens, name):
    """Recompute ActQuant's codes from each captured pre-quantization input, check them against
    what ActQuant returned (bit-exact), and lay them out as documented in AQ_FILES."""
    import re
    n_layers = cfg.num_hidden_layers
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    width = {"q_proj": cfg.hidden_size, "o_proj": cfg.num_attention_heads * head_dim,
             "gate_proj": cfg.hidden_size, "down_proj": cfg.intermediate_size}
    by = {}
    for mn, r in cap.rec.items():
        m = re.search(r"layers\.(\d+)\..*?(\w+_proj)$", mn)
        if not m:
            raise RuntimeError(f"unexpected AutoBitLinear {mn}")
        by[(int(m.group(1)), m.group(2))] = (mn, r)
    if len(by) != 7 * n_layers or len(cap.rec) != 7 * n_layers:
        raise RuntimeError(f"captured {len(cap.rec)} AutoBitLinear calls, want {7 * n_layers}")
    wq_fn = cap.globs.get("WeightQuant")
    F = torch.nn.functional
    codes, absmaxes = [], []
    st = dict(rows=0, clamp_rows=0, s_rcp_rows=0, s_div_rows=0, s_div_codes=0, half_ties=0, near_ties=0,
              at_pm127=0, at_m128=0, linear_exact=0, linear_checked=0)
    with torch.no_grad():
        for l in range(n_layers):
            for which in AQ_ORDER:
                mn, r = by[(l, which)]
                x = r["x"]
                if "xq" not in r:
                    raise RuntimeError(f"{mn}: ActQuant.apply was not called")
                if x.dtype != torch.float32:
                    raise RuntimeError(f"{mn}: input dtype {x.dtype}, want float32")
                if not bits_equal(torch, x, r["x_aq"]):
                    raise RuntimeError(f"{mn}: ActQuant got a different tensor than the module input")
                x2 = x.reshape(-1, x.shape[-1])
                if x2.shape != (n_tokens, width[which]):
                    raise RuntimeError(f"{mn}: input shape {tuple(x.shape)}, want [{n_tokens}][{width[which]}]")
                # Exactly ActQuant's arithmetic (integrations/bitnet.py), in float32.
                xf = x.float()
                absmax = xf.abs().max(dim=-1, keepdim=True).values
                s = 127 / xf.abs().max(dim=-1, keepdim=True).values.clamp_(min=1e-5)
                qf = (xf * s).round().clamp(-128, 127)
                deq = (qf / s).to(x.dtype)
                if not bits_equal(torch, deq, r["xq"]):
                    nd = int((deq.view(torch.int32) != r["xq"].view(torch.int32)).sum())
                    raise RuntimeError(f"{mn}: codes/s differs from ActQuant's output in {nd} elements")
                q8 = qf.to(torch.int8)
                if not torch.equal(q8.to(torch.float32), qf):
                    raise RuntimeError(f"{mn}: codes not integers in [-128,127]")
                for other in AQ_SAME[which]:
                    on, orr = by[(l, other)]
                    if not bits_equal(torch, orr["x"], x) or not bits_equal(torch, orr["xq"], r["xq"]):
                        raise RuntimeError(f"{on} does not see the same input as {mn}")
                # The output of the linear is F.linear of exactly this quantized input.
                for nm in [which] + AQ_SAME[which]:
                    on, orr = by[(l, nm)]
                    mod = orr["mod"]
                    if wq_fn is not None and getattr(mod, "online_quant", False):
                        y = F.linear(orr["xq"], wq_fn.apply(mod.weight), mod.bias)
                        st["linear_checked"] += 1
                        st["linear_exact"] += int(bits_equal(torch, y, orr["y"]))
                # Statistics for the notes: how fragile the codes are.
                a2 = absmax.reshape(-1)
                st["rows"] += a2.numel()
                st["clamp_rows"] += int((a2 < 1e-5).sum())
                ac = a2.clamp(min=1e-5).reshape(-1, 1)
                s_rcp = ac.reciprocal() * 127.0                    # (1.0f / absmax) * 127.0f, two roundings
                st["s_rcp_rows"] += int((s_rcp.view(torch.int32) != s.reshape(-1, 1).view(torch.int32)).sum())
                s_div = torch.div(torch.full_like(ac, 127.0), ac)   # 127.0f / absmax, one rounding
                st["s_div_rows"] += int((s_div.view(torch.int32) != s.reshape(-1, 1).view(torch.int32)).sum())
                q_div = (xf.reshape(-1, xf.shape[-1]) * s_div).round().clamp(-128, 127)
                st["s_div_codes"] += int((q_div != qf.reshape(q_div.shape)).sum())
                t = (xf * s).reshape(-1)
                fr = (t - t.floor() - 0.5).abs()
                st["half_ties"] += int((fr == 0).sum())
                st["near_ties"] += int((fr < 1e-3).sum())
                st["at_pm127"] += int((qf.abs() == 127).sum())
                st["at_m128"] += int((qf == -128).sum())
                codes.append(q8.reshape(-1))
                absmaxes.append(a2)
    log(f"[{name}] ActQuant capture: {len(cap.rec)} AutoBitLinear calls; codes/s == ActQuant output bit-exact "
        f"for all; k/v == q and up == gate inputs; F.linear(ActQuant out, WeightQuant W) == module output "
        f"bit-exact in {st['linear_exact']}/{st['linear_checked']}")
    log(f"[{name}] ActQuant stats: rows={st['rows']} rows_clamped={st['clamp_rows']} "
        f"rows_where_s!=(1/absmax)*127={st['s_rcp_rows']} "
        f"rows_where_s!=127.0f/absmax={st['s_div_rows']} codes_changed_by_127.0f/absmax={st['s_div_codes']} "
        f"exact_.5_ties={st['half_ties']} within_1e-3_of_.5={st['near_ties']} |q|==127:{st['at_pm127']} "
        f"q==-128:{st['at_m128']}")
    return torch.cat(codes).contiguous(), torch.cat(absmaxes).contiguous()


def load_f32(transformers, torch, Model, d, arch):
    try:
        m = Model.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        how = "from_pretrained(dtype=float32, attn_implementation=eager)"
    except Exception as e:  # noqa: BLE001
        if not arch.get("quant"):
            raise
        log(f"[{arch['name']}] from_pretrained failed ({type(e).__name__}: {e}); manual AutoBitLinear replacement")
        m = manual_bitnet_load(transformers, torch, Model, d, arch)
        how = "manual replace_with_bitnet_linear + load_state_dict"
    if arch.get("quant") and how.startswith("from_pretrained"):
        n_abl = sum(1 for x in m.modules() if type(x).__name__ == "AutoBitLinear" and getattr(x, "online_quant", False))
        bad = [k for k, v in m.state_dict().items() if v.dtype != torch.float32]
        if n_abl == 0 or bad:
            log(f"[{arch['name']}] from_pretrained gave {n_abl} online AutoBitLinear, non-f32 tensors {bad[:5]}; "
                "using the manual path instead")
            m = manual_bitnet_load(transformers, torch, Model, d, arch)
            how = "manual replace_with_bitnet_linear + load_state_dict"
    devs = {p.device.type for p in m.parameters()}
    dts = {p.dtype for p in m.parameters()}
    log(f"[{arch['name']}] loaded params on {devs}, dtypes {dts}")
    if devs != {"cpu"}:
        m = m.to("cpu")
    if dts != {torch.float32}:
        raise RuntimeError(f"params not float32: {dts}")
    return m, how


def manual_bitnet_load(transformers, torch, Model, d, arch):
    from safetensors.torch import load_file
    from transformers.integrations.bitnet import replace_with_bitnet_linear
    from transformers.utils.quantization_config import BitNetQuantConfig
    cfg = transformers.AutoConfig.from_pretrained(d)
    qc = dict(arch["quant"])
    qc.pop("quant_method")
    qcfg = BitNetQuantConfig(**qc)
    del cfg.quantization_config
    cfg._attn_implementation = "eager"
    m = Model(cfg).to(torch.float32)
    replace_with_bitnet_linear(m, modules_to_not_convert=["lm_head"], quantization_config=qcfg)
    sd = {k: v.to(torch.float32) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    missing, unexpected = m.load_state_dict(sd, strict=False, assign=True)
    log(f"manual load: missing={missing} unexpected={unexpected}")
    m.tie_weights()
    return m


def forward(torch, model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    hs = []
    hooks = [layer.register_forward_hook(
        lambda mod, inp, out: hs.append((out[0] if isinstance(out, tuple) else out).detach().clone()))
        for layer in model.model.layers]
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    logits = out.logits[0].to(torch.float32).contiguous()
    hidden = torch.stack([h.reshape(len(tokens), -1) for h in hs]).to(torch.float32).contiguous()
    assert logits.shape == (len(tokens), VOCAB), logits.shape
    assert torch.isfinite(logits).all()
    return logits, hidden


def check_compiled(outdir):
    import torch
    import torch._dynamo
    import transformers
    torch.set_num_threads(1)
    d = os.path.join(outdir, "bitnet")
    arch = [a for a in ARCHS if a["name"] == "bitnet"][0]
    with open(os.path.join(d, "tokens.json")) as f:
        tokens = json.load(f)["tokens"]
    ref = torch.frombuffer(bytearray(open(os.path.join(d, "logits.f32"), "rb").read()),
                           dtype=torch.float32).view(len(tokens), -1)
    m, how = load_f32(transformers, torch, transformers.BitNetForCausalLM, d, arch)
    m.eval()
    logits, _ = forward(torch, m, tokens)
    diff = (logits - ref).abs().max().item()
    log(f"[bitnet] torch.compile'd quant functions vs eager golden: max|diff| = {diff:.3e}, "
        f"max|ref| = {ref.abs().max().item():.4f}")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--check-compiled":
        return check_compiled(args[1])
    aq_codes = False
    if args and args[0] == "--aq-codes":
        aq_codes = True
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    outdir = args[0]
    os.makedirs(outdir, exist_ok=True)
    # transformers' BitNet quant functions are wrapped in @torch.compile at import time;
    # with dynamo disabled before that import they run as plain eager code.
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    import torch
    import transformers
    torch.set_num_threads(1)
    # transformers' BitNet quant functions are wrapped in @torch.compile; the golden
    # data uses their plain (eager) semantics. --check-compiled compares.
    torch._dynamo.config.disable = True
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"cuda available: {torch.cuda.is_available()}")

    tokdir = os.path.join(outdir, "_tokenizer")
    os.makedirs(tokdir, exist_ok=True)
    tok = build_tokenizer(tokdir)
    tokens = make_tokens(tok)
    log("tokens:", tokens, "->", repr(tok.decode(tokens, skip_special_tokens=False)))
    try:
        tokenizer_check(tokdir, os.path.join(outdir, "tokenizer_check.json"))
    except Exception as e:  # noqa: BLE001
        log(f"tokenizer check FAILED: {type(e).__name__}: {e}")

    only = os.environ.get("GOLDEN_ONLY")
    for arch in ARCHS:
        if only and arch["name"] not in only.split(","):
            continue
        build_one(transformers, torch, arch, outdir, tokens, aq_codes=aq_codes)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tokdir, fn), "rb") as f, \
                    open(os.path.join(outdir, arch["name"], fn), "wb") as g:
                g.write(f.read())
    import shutil
    shutil.rmtree(tokdir)
    log("done")


if __name__ == "__main__":
    main()
