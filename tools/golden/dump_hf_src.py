#!/usr/bin/env python3
"""Dump the transformers source the C forward pass must match (run on the GPU machine).

    python3 tools/golden/dump_hf_src.py OUTDIR
"""
import importlib
import inspect
import os
import sys

MODULES = [
    "transformers.models.bitnet.modeling_bitnet",
    "transformers.models.bitnet.configuration_bitnet",
    "transformers.integrations.bitnet",
    "transformers.quantizers.quantizer_bitnet",
    "transformers.modeling_rope_utils",
    "transformers.models.llama.modeling_llama",
    "transformers.models.mistral.modeling_mistral",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.qwen3.modeling_qwen3",
    "transformers.activations",
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    import transformers
    print("transformers", transformers.__version__, "at", os.path.dirname(transformers.__file__))
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
            src = inspect.getsource(mod)
        except Exception as e:  # noqa: BLE001
            print("FAILED", name, type(e).__name__, e)
            continue
        with open(os.path.join(out, name + ".py"), "w") as f:
            f.write(src)
        print(f"{name}: {len(src)} chars")
    try:
        from transformers.utils import quantization_config as qc
        src = inspect.getsource(qc.BitNetQuantConfig)
        with open(os.path.join(out, "BitNetQuantConfig.py"), "w") as f:
            f.write(src)
        print(src)
    except Exception as e:  # noqa: BLE001
        print("FAILED BitNetQuantConfig", e)


if __name__ == "__main__":
    main()
