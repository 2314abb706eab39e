#!/usr/bin/env bash
# demo_ternary.sh — what the ternary weight types cost on a ternary model (docs/formats.md,
# "The ternary types on the ternary demo model"), and lean4 on the F16 twin.
#
# Owns: converting the trained ternary demo checkpoint (docs/demo-model.md, BitNetForCausalLM,
# GGUF arch bitnet-b1.58) to f32, f16, bf16, tq1_0, tq2_0 and i2_s, and `1bit quantize`-ing its
# f16 file to the TQ1_0, TQ2_0 and I2_S mixes; then, for every file, KL divergence and
# same-top-token rate against the f16 file with `1bit perplexity --kl-divergence`, once with the
# fast CPU kernels (what users run) and once with OB_CPU_KERNELS=reference (rows decoded to f32,
# f32 activations: isolates the stored weights from kernel arithmetic). It also tries
# llama.cpp's and bitnet.cpp's llama-perplexity on each file and prints the first error when
# they refuse it. With TWIN set (default build/demo/gguf/twin-f16.gguf): the twin quantized with
# `--pure` to LEAN4, Q4_0 and IQ4_XS, against the twin's f16 file (1bit only: llama.cpp has no
# lean4). Prints Markdown. Does not own: the checkpoint (tools/train/), building the peers.
#
# Usage:  tools/compat/demo_ternary.sh > report.md     (about 15 minutes on 2 busy cores)
# Environment:
#   CKPT      the ternary checkpoint folder (default build/demo/ternary)
#   TWIN      the twin's f16 GGUF ("" to skip the lean4 rows)
#   TEXT      text (default build/corpus/out/valid.txt), CHUNKS 512-token chunks (default 8)
#   OUT       scratch folder (default build/tern), THREADS (default 2)
#   LLAMA_BIN llama.cpp's build/bin (default ../peers/llama.cpp/build/bin)
#   BITNET_BIN bitnet.cpp's build/bin (default ../peers/BitNet/build/bin)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CKPT=${CKPT:-build/demo/ternary}
TWIN=${TWIN-build/demo/gguf/twin-f16.gguf}
TEXT=${TEXT:-build/corpus/out/valid.txt}
CHUNKS=${CHUNKS:-8}
OUT=${OUT:-build/tern}
THREADS=${THREADS:-2}
LLAMA_BIN=${LLAMA_BIN:-$ROOT/../peers/llama.cpp/build/bin}
BITNET_BIN=${BITNET_BIN:-$ROOT/../peers/BitNet/build/bin}
OB=./build/1bit
die() { echo "demo_ternary.sh: $*" >&2; exit 1; }
[ -f "$CKPT/model.safetensors" ] || die "no $CKPT/model.safetensors (docs/demo-model.md: unpack ckpt_ternary.tar.gz)"
[ -f "$TEXT" ] || die "no $TEXT"
mkdir -p "$OUT"
make -s build/1bit >"$OUT/make.log" 2>&1 || { cat "$OUT/make.log" >&2; die "make failed"; }

for t in f32 f16 bf16 tq1_0 tq2_0 i2_s; do
    $OB convert "$CKPT" -o "$OUT/demo-$t.gguf" --type "$t" >"$OUT/convert-$t.log" 2>&1 || die "convert $t: $(tail -1 "$OUT/convert-$t.log")"
done
for t in TQ1_0 TQ2_0 I2_S; do
    $OB quantize "$OUT/demo-f16.gguf" "$OUT/demo-mix-$t.gguf" "$t" "$THREADS" >"$OUT/quantize-$t.log" 2>&1 ||
        die "quantize $t: $(tail -1 "$OUT/quantize-$t.log")"
done

# bits/weight over the ternary linears (2-D tensors other than token_embd/output) and over
# every matrix; the tensor types of the file
stats() {
    python3 -c 'import sys; sys.path.insert(0,"tools/compat"); import compare
t,_=compare.gguf_read(sys.argv[1]); b=e=bl=el=0; ty={}
for n,(typ,sh,off,nb) in t.items():
    if len(sh)<2: continue
    k=1
    for d in sh: k*=d
    b+=nb; e+=k
    if not n.startswith(("token_embd","output.")): bl+=nb; el+=k
    else: ty[n.split(".")[0]]=typ
print("%.3f | %.3f | %s" % (8*bl/el, 8*b/e, ", ".join("%s %s" % kv for kv in sorted(ty.items()))))' "$1"
}
kl() { # kl FILE BASE [env...] -> "kld +- err | top | ln ppl ratio"
    local f=$1 base=$2; shift 2
    env "$@" $OB perplexity -m "$f" -f "$TEXT" -t "$THREADS" --kl-divergence-base "$base" --kl-divergence -o json 2>"$OUT/kl.err" |
        python3 -c 'import json,sys; j=json.load(sys.stdin)
print("%.6f +- %.6f | %.2f | %+.5f" % (j["kld_mean"], j["kld_stderr"], 100*j["same_top"], j["ln_ppl_ratio"]))' 2>/dev/null ||
        echo "fail: $(head -c 150 "$OUT/kl.err") | | "
}
peer() { # peer BIN FILE [FLAGS] -> "runs" or the first error
    [ -x "$1/llama-perplexity" ] || { echo "not built"; return; }
    local r b=$1 f=$2; shift 2
    r=$("$b/llama-perplexity" -m "$f" -f "$TEXT" -c 512 --chunks 1 -t "$THREADS" "$@" 2>&1)
    local rc=$?
    if echo "$r" | grep -q 'estimated PPL\|Final estimate'; then echo "runs"; return; fi
    r=$(echo "$r" | grep -m1 -E 'error loading model|of type [0-9]+ |error:|failed' | sed 's/^[0-9. ]*[EW] //; s/^llama_model_load: //' | cut -c1-110)
    echo "${r:-no output, exit $rc}"
}
base_runs() { # base_runs FILE KLD: the base's run with fast and with reference kernels
    $OB perplexity -m "$1" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" --kl-divergence-base "$2.fast" -o json >"$2.fast.json" 2>&1 ||
        die "base run failed: $(cat "$2.fast.json")"
    OB_CPU_KERNELS=reference $OB perplexity -m "$1" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" \
        --kl-divergence-base "$2.ref" -o json >"$2.ref.json" 2>&1 || die "base run (reference) failed: $(cat "$2.ref.json")"
}

echo "## The ternary demo model: every ternary file against its f16 file"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $THREADS threads"
echo "- 1bit: ${OB_REV:-$(git rev-parse --short HEAD 2>/dev/null)}; checkpoint: $CKPT (model.safetensors sha256 $(sha256sum "$CKPT/model.safetensors" | cut -c1-12)...)"
echo "- text: $CHUNKS chunks of 512 tokens of \`$TEXT\`, second halves scored; base: \`demo-f16.gguf\`"
echo
base_runs "$OUT/demo-f16.gguf" "$OUT/demo-f16.kld"
echo "| file | made by | bits/weight (ternary linears) | bits/weight (all matrices) | embedding | KL (fast kernels) | top % | ln(PPL/PPL f16) | KL (reference kernels) | top % | ln(PPL/PPL f16) | llama.cpp | bitnet.cpp |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for f in f16 f32 bf16 tq1_0 tq2_0 i2_s mix-TQ1_0 mix-TQ2_0 mix-I2_S; do
    g=$OUT/demo-$f.gguf
    case $f in mix-*) by="\`quantize demo-f16.gguf ${f#mix-}\`" ;; *) by="\`convert --type $f\`" ;; esac
    echo "| $f | $by | $(stats "$g") | $(kl "$g" "$OUT/demo-f16.kld.fast") | $(kl "$g" "$OUT/demo-f16.kld.ref" OB_CPU_KERNELS=reference) | $(peer "$LLAMA_BIN" "$g" --no-repack) | $(peer "$BITNET_BIN" "$g") |"
done
echo
echo "Byte comparison of the ternary tensors: $(python3 tools/compat/compare.py bytes "$OUT/demo-tq2_0.gguf" "$OUT/demo-mix-TQ2_0.gguf" --by-type 2>&1 | head -c 300)"
echo

if [ -n "$TWIN" ] && [ -f "$TWIN" ]; then
    echo "## lean4 on the F16 twin (1bit only)"
    echo
    base_runs "$TWIN" "$OUT/twin-f16.kld"
    echo "| type | bits/weight (all matrices) | KL (fast kernels) | top % | ln(PPL/PPL f16) | KL (reference kernels) | top % | ln(PPL/PPL f16) |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
    for t in LEAN4 Q4_0 IQ4_XS; do
        g=$OUT/twin-$t.gguf
        $OB quantize --pure "$TWIN" "$g" "$t" "$THREADS" >"$OUT/twin-$t.log" 2>&1 || { echo "| $t | quantize failed: $(tail -1 "$OUT/twin-$t.log") |"; continue; }
        echo "| $(echo "$t" | tr A-Z a-z) | $(stats "$g" | cut -d'|' -f2 | tr -d ' ') | $(kl "$g" "$OUT/twin-f16.kld.fast") | $(kl "$g" "$OUT/twin-f16.kld.ref" OB_CPU_KERNELS=reference) |"
    done
    echo
fi
