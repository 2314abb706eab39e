#!/usr/bin/env bash
# formats.sh — every weight type between 1bit and llama.cpp (docs/compat.md "Weight types",
# docs/formats.md).
#
# Owns: for each model (the golden llama and qwen2 checkpoints, rows of 64; a random
# llama-arch model with rows of 256; the trained demo model when present) and each type
# (every base type with --pure, and the mixes users know), quantizing the same source with
# llama.cpp's llama-quantize and with `1bit quantize`, then:
#   1. llama-quantize's file in both engines: logits of llama.cpp against 1bit, and
#      llama.cpp on its own f32 dequantization of the file against 1bit on the file (do the
#      two decoders agree?);
#   2. 1bit's file in both engines, the same two comparisons;
#   3. the two files side by side: every tensor of the same type (the mix rules agree), and
#      the round-to-nearest types byte for byte;
#   4. quality: weight RMSE against the source for both files, and on the demo model KL
#      divergence and same-top-token rate against the f16 model, measured by llama.cpp's
#      llama-perplexity and by `1bit perplexity`, for both files.
# Prints Markdown tables. Does not own: building llama.cpp (point LLAMA_DIR at a build), the
# comparison arithmetic (compare.py), the weight error (weight_err.c).
#
# Usage:  tools/compat/formats.sh > report.md       (about an hour on 2 busy cores; KL=0: minutes)
# Environment:
#   LLAMA_DIR  llama.cpp checkout with a CMake build (default ../peers/llama.cpp)
#   OUT        scratch folder (default build/formats)
#   THREADS    threads for every tool (default 2)
#   DEMO       the demo model's f16 GGUF (default: models/twin-f16.gguf, else
#              build/demo/gguf/twin-f16.gguf; none: its rows are left out)
#   TEXT       text for the demo's KL divergence (default build/corpus/out/valid.txt)
#   CHUNKS     512-token chunks of TEXT for the KL divergence (default 8)
#   KL         0: skip the KL divergence runs
#   MODELS     subset of "golden-llama golden-qwen2 random256 demo"
#   OB_REV     what to print as 1bit's revision (default: git HEAD, and whether src/ is modified)
#   IMATRIX    0: skip section 5 (the demo model quantized with an importance matrix that
#              tools/compat/make_imatrix.c computes over IMTEXT, default the first 300 kB of
#              the training texts in TRAIN=build/corpus/out/train.jsonl.gz: not the KL text)
#   SPECS      the types of sections 1-4, as "pure:NAME" (llama-quantize --pure) or "mix:NAME"
#              (default: every type and mix below; e.g. SPECS="pure:F32 pure:F16 pure:BF16")
#   SECTIONS   which of 1..5 to print (default "1 2 3 4 5"); files already quantized are reused
#              when REUSE=1
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
LLAMA_DIR=${LLAMA_DIR:-$ROOT/../peers/llama.cpp}
LLAMA_DIR=$(cd "$LLAMA_DIR" 2>/dev/null && pwd) || { echo "formats.sh: LLAMA_DIR does not exist" >&2; exit 1; }
OUT=${OUT:-build/formats}
THREADS=${THREADS:-2}
TEXT=${TEXT:-build/corpus/out/valid.txt}
CHUNKS=${CHUNKS:-8}
KL=${KL:-1}
IMATRIX=${IMATRIX:-1}
SECTIONS=${SECTIONS:-"1 2 3 4 5"}
REUSE=${REUSE:-0}
on() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -z "${DEMO:-}" ]; then
    for d in models/twin-f16.gguf build/demo/gguf/twin-f16.gguf; do [ -f "$d" ] && { DEMO=$d; break; }; done
fi
DEMO=${DEMO:-}
MODELS=${MODELS:-"golden-llama golden-qwen2 random256 demo"}
LLBIN=$LLAMA_DIR/build/bin
QUANTIZE=$LLBIN/llama-quantize
CMP="python3 tools/compat/compare.py"
OB=./build/1bit

die() { echo "formats.sh: $*" >&2; exit 1; }
[ -f "$LLBIN/libllama.so" ] || die "no $LLBIN/libllama.so: build llama.cpp first (this script never builds it)"
[ -x "$QUANTIZE" ] || die "no $QUANTIZE"
mkdir -p "$OUT"

# ---- build our programs ---------------------------------------------------------------------
make -s build/1bit build/lib1bit.a >"$OUT/make.log" 2>&1 || { cat "$OUT/make.log" >&2; die "make failed"; }
LIBS=$(make -s -p -n 2>/dev/null | sed -n 's/^LDLIBS = //p' | head -1)
cc -O2 -Wall -Wextra -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" tools/compat/llama_logits.c tools/compat/logits_common.c \
   -o "$OUT/llama_logits" -L"$LLBIN" -lllama -lggml -lggml-base -Wl,-rpath,"$LLBIN" || die "building llama_logits failed"
cc -O2 -Wall -Wextra -std=c17 -D_GNU_SOURCE -Iinclude tools/compat/ob_logits.c tools/compat/logits_common.c build/lib1bit.a \
   $LIBS -o "$OUT/ob_logits" || die "building ob_logits failed"
cc -O2 -Wall -Wextra -std=c17 -D_GNU_SOURCE -Isrc tools/compat/weight_err.c build/lib1bit.a $LIBS -o "$OUT/weight_err" \
   || die "building weight_err failed"
cc -O2 -Wall -Wextra -std=c17 -D_GNU_SOURCE -Iinclude -Isrc tools/compat/make_imatrix.c build/lib1bit.a $LIBS -o "$OUT/make_imatrix" \
   || die "building make_imatrix failed"

# ---- models ----------------------------------------------------------------------------------
# model_src / model_tokens / model_vocab for each name; sources are f32 (converted) or the
# demo's f16 as it is.
cat >"$OUT/random256.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "bos_token_id": 318, "eos_token_id": 319, "tie_word_embeddings": false}
EOF
declare -A SRC TOK NV
for m in $MODELS; do
    case $m in
    golden-*)
        a=${m#golden-}
        $OB convert "tests/golden/$a" -o "$OUT/$m-f32.gguf" --type f32 >"$OUT/$m.convert.log" 2>&1 || die "convert $a failed"
        SRC[$m]=$OUT/$m-f32.gguf; TOK[$m]=tests/golden/$a/tokens.json; NV[$m]=320 ;;
    random256)
        $OB convert --random "$OUT/random256.json" -o "$OUT/$m-f32.gguf" --type f32 >"$OUT/$m.convert.log" 2>&1 || die "convert random256 failed"
        SRC[$m]=$OUT/$m-f32.gguf; TOK[$m]=tests/golden/llama/tokens.json; NV[$m]=320 ;;
    demo)
        [ -n "$DEMO" ] && [ -f "$DEMO" ] || continue
        SRC[$m]=$DEMO
        # 64 tokens of the text, as llama.cpp tokenizes it (the file's own vocabulary)
        "$OUT/llama_logits" "$DEMO" --tokenize "$(head -c 400 "$TEXT")" 2>/dev/null |
            python3 -c 'import json,sys; t=json.load(sys.stdin)["tokens"][:64]; print(json.dumps({"tokens": t}))' >"$OUT/demo.tokens.json"
        TOK[$m]=$OUT/demo.tokens.json
        NV[$m]=$(python3 -c 'import sys; sys.path.insert(0,"tools/compat"); import compare
t,_=compare.gguf_read(sys.argv[1]); print(t["token_embd.weight"][1][1])' "$DEMO") ;;
    esac
done
MODELS_ON=""
for m in $MODELS; do [ -n "${SRC[$m]:-}" ] && MODELS_ON="$MODELS_ON $m"; done

# Types: every base type alone (--pure; mxfp4 through MXFP4_MOE, as llama-quantize names it)
# and the mixes. A spec is "pure:NAME" or "mix:NAME".
SPECS=${SPECS:-"pure:Q8_0 pure:Q4_0 pure:Q4_1 pure:Q5_0 pure:Q5_1 pure:TQ1_0 pure:TQ2_0 pure:MXFP4_MOE pure:IQ4_NL pure:IQ4_XS
pure:Q2_K pure:Q3_K pure:Q4_K pure:Q5_K pure:Q6_K mix:Q4_K_M mix:Q4_K_S mix:Q5_K_M mix:Q5_K_S mix:Q6_K mix:Q8_0
mix:Q3_K_S mix:Q3_K_M mix:Q3_K_L mix:Q2_K mix:IQ4_XS mix:IQ4_NL mix:Q4_0"}
label() { local k=${1%%:*} n=${1#*:}; [ "$k" = pure ] && { [ "$n" = MXFP4_MOE ] && echo "mxfp4" || echo "$n" | tr A-Z a-z | sed 's/_k$/_K/'; } || echo "$n"; }
flags() { [ "${1%%:*}" = pure ] && echo "--pure"; }

# ---- quantize everything once ------------------------------------------------------------
on 1 || on 2 || on 3 || on 4 || MODELS_Q=""
for m in ${MODELS_Q-$MODELS_ON}; do
    for sp in $SPECS; do
        n=${sp#*:}; tag=$(echo "$sp" | tr ':' '-')
        [ "$REUSE" = 1 ] && [ -f "$OUT/$m-ll-$tag.gguf" ] && [ -f "$OUT/$m-ob-$tag.gguf" ] && continue
        "$QUANTIZE" $(flags "$sp") "${SRC[$m]}" "$OUT/$m-ll-$tag.gguf" "$n" "$THREADS" >"$OUT/$m-ll-$tag.log" 2>&1 ||
            rm -f "$OUT/$m-ll-$tag.gguf"
        $OB quantize $(flags "$sp") "${SRC[$m]}" "$OUT/$m-ob-$tag.gguf" "$n" "$THREADS" >"$OUT/$m-ob-$tag.log" 2>&1 ||
            rm -f "$OUT/$m-ob-$tag.gguf"
        for who in ll ob; do # llama.cpp's f32 dequantization of each file
            f=$OUT/$m-$who-$tag.gguf
            [ -f "$f" ] && "$QUANTIZE" --allow-requantize "$f" "$OUT/$m-$who-$tag-deq.gguf" F32 "$THREADS" >/dev/null 2>&1
        done
    done
done

# ---- logits in both engines ------------------------------------------------------------------
# logits NAME MODEL TOKENS: llama.cpp and 1bit on one file -> $OUT/NAME.{ll,ob}.f32
run_ll() { ( exec "$OUT/llama_logits" "$2" -t "$3" -o "$OUT/$1.ll.f32" --threads "$THREADS" ) >"$OUT/$1.ll.log" 2>&1 || rm -f "$OUT/$1.ll.f32"; }
run_ob() { ( exec "$OUT/ob_logits" "$2" -t "$3" -o "$OUT/$1.ob.f32" --threads "$THREADS" ) >"$OUT/$1.ob.log" 2>&1 || rm -f "$OUT/$1.ob.f32"; }
# 1bit's reference matmul: each weight row decoded to f32 (format/quant's decoders), f32
# activations; against llama.cpp on its f32 dequantization it isolates the decoders.
run_ob_ref() { ( OB_CPU_KERNELS=reference exec "$OUT/ob_logits" "$2" -t "$3" -o "$OUT/$1.obref.f32" --threads "$THREADS" ) \
                   >"$OUT/$1.obref.log" 2>&1 || rm -f "$OUT/$1.obref.f32"; }
pair() { # pair NV A.f32 B.f32 -> "max top1" cells
    local r
    r=$($CMP pair "$1" "$2" "$3")
    [ "$r" = fail ] && { echo "fail | -"; return; }
    echo "$r" | sed 's/max_abs_diff \([^ ]*\) top1 \(.*\)/\1 | \2/'
}

section_engines() { # section_engines WHO TITLE
    local who=$1
    echo "$2"
    echo
    echo "Columns 4-5: both engines on the file as they run it (each may round activations to 8 bits for its integer"
    echo "kernels). Columns 6-7: llama.cpp on its own f32 dequantization of the file (\`llama-quantize --allow-requantize F T.gguf F32\`)"
    echo "against 1bit's reference path on the file (\`OB_CPU_KERNELS=reference\`: rows decoded to f32, f32 activations): do the decoders agree?"
    echo
    echo "| model | type | tensors | max abs llama.cpp - 1bit | top-1 equal | max abs llama.cpp (own f32 dequant) - 1bit (reference) | top-1 equal |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    for m in $MODELS_ON; do
        for sp in $SPECS; do
            tag=$(echo "$sp" | tr ':' '-'); f=$OUT/$m-$who-$tag.gguf; d=$OUT/$m-$who-$tag-deq.gguf
            if [ ! -f "$f" ]; then
                echo "| $m | $(label "$sp") | | | | | quantizing failed: $(grep -m1 -iE 'error|failed|refus' "$OUT/$m-$who-$tag.log" | cut -c1-120) |"
                continue
            fi
            run_ll "$m-$who-$tag" "$f" "${TOK[$m]}"
            run_ob "$m-$who-$tag" "$f" "${TOK[$m]}"
            run_ll "$m-$who-$tag-deq" "$d" "${TOK[$m]}"
            run_ob_ref "$m-$who-$tag" "$f" "${TOK[$m]}"
            direct=$(pair "${NV[$m]}" "$OUT/$m-$who-$tag.ll.f32" "$OUT/$m-$who-$tag.ob.f32")
            deq=$(pair "${NV[$m]}" "$OUT/$m-$who-$tag-deq.ll.f32" "$OUT/$m-$who-$tag.obref.f32")
            echo "| $m | $(label "$sp") | $($CMP types "$f") | $direct | $deq |"
        done
    done
    echo
}

echo "## Run"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average at start $(cut -d' ' -f1 /proc/loadavg)"
if [ -n "${OB_REV:-}" ]; then echo "- 1bit: $OB_REV"; else
echo "- 1bit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include 2>/dev/null || echo ' + uncommitted changes in src/ include/')"; fi
echo "- llama.cpp: $(git -C "$LLAMA_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown), CPU, $THREADS threads; llama_logits: KV f32, flash attention off, no repacking"
echo "- models:$(for m in $MODELS_ON; do printf ' %s (%s)' "$m" "${SRC[$m]}"; done)"
echo

on 1 && section_engines ll "## 1. Files written by llama-quantize, in both engines"
on 2 && section_engines ob "## 2. Files written by \`1bit quantize\`, in both engines"

# ---- the two quantizers side by side -----------------------------------------------------------
if on 3; then
echo "## 3. \`1bit quantize\` against \`llama-quantize\` on the same source"
echo
echo "| model | type | tensor types | tensors of the same type: bytes |"
echo "| --- | --- | --- | --- |"
for m in $MODELS_ON; do
    for sp in $SPECS; do
        tag=$(echo "$sp" | tr ':' '-'); a=$OUT/$m-ob-$tag.gguf; b=$OUT/$m-ll-$tag.gguf
        [ -f "$a" ] && [ -f "$b" ] || { echo "| $m | $(label "$sp") | missing file | |"; continue; }
        echo "| $m | $(label "$sp") | $($CMP typediff "$a" "$b") | $($CMP bytes "$a" "$b" --by-type) |"
    done
done
echo
fi

# ---- quality -----------------------------------------------------------------------------------
kl_ob() { # kl_ob FILE -> "kld top" by 1bit perplexity
    $OB perplexity -m "$1" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" --kl-divergence-base "$OUT/demo.kld" \
        --kl-divergence -o json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.6f %.2f" % (j["kld_mean"], 100*j["same_top"]))' 2>/dev/null || echo "fail fail"
}
kl_ll() { # kl_ll FILE -> "kld top" by llama-perplexity
    "$LLBIN/llama-perplexity" -m "$1" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" --no-repack \
        --kl-divergence-base "$OUT/demo.llkld" --kl-divergence 2>&1 |
        sed -n 's/^Mean    KLD: *\([0-9.]*\).*/\1/p; s/^Same top p: *\([0-9.]*\).*/\1/p' | tr '\n' ' ' | sed 's/ $//' || echo "fail fail"
}
bpw() { # bits per weight of the matrices: 8 * bytes / elements over tensors with >= 2 dims
    python3 -c 'import sys; sys.path.insert(0,"tools/compat"); import compare
t,_=compare.gguf_read(sys.argv[1]); b=e=0
for n,(ty,sh,off,nb) in t.items():
    if len(sh)>=2:
        k=1
        for d in sh: k*=d
        b+=nb; e+=k
print("%.3f" % (8*b/e))' "$1"
}

if on 4 || on 5; then
    if [ "$KL" = 1 ] && [ -n "${SRC[demo]:-}" ]; then
        $OB perplexity -m "${SRC[demo]}" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" --kl-divergence-base "$OUT/demo.kld" >/dev/null 2>&1
        "$LLBIN/llama-perplexity" -m "${SRC[demo]}" -f "$TEXT" -c 512 --chunks "$CHUNKS" -t "$THREADS" --no-repack \
            --kl-divergence-base "$OUT/demo.llkld" >/dev/null 2>&1
    fi
fi
quality_row() { # quality_row MODEL LABEL A.gguf B.gguf [--imatrix F]: one table row, 1bit's file A against llama.cpp's B
    local m=$1 lab=$2 a=$3 b=$4; shift 4
    local ea eb ratio la= lb= lta= ltb= oa= obb= ota= otb= col=2
    [ $# -gt 0 ] && col=8 # with an importance matrix: the weighted RMSE
    ea=$("$OUT/weight_err" "${SRC[$m]}" "$a" "$@" | awk -v c=$col '{print $c}')
    eb=$("$OUT/weight_err" "${SRC[$m]}" "$b" "$@" | awk -v c=$col '{print $c}')
    ratio=$(python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.4f' % (a/b) if b else '-')" "$ea" "$eb")
    if [ "$m" = demo ] && [ "$KL" = 1 ]; then
        read -r la lta <<<"$(kl_ll "$a")"; read -r lb ltb <<<"$(kl_ll "$b")"
        read -r oa ota <<<"$(kl_ob "$a")"; read -r obb otb <<<"$(kl_ob "$b")"
    fi
    echo "| $m | $lab | $(bpw "$a") | $(bpw "$b") | $ea | $eb | $ratio | $la | $lb | $lta | $ltb | $oa | $obb | $ota | $otb |"
}
QHEAD="| model | type | bits/weight 1bit | bits/weight llama.cpp | RMSE 1bit | RMSE llama.cpp | 1bit/llama.cpp | KL llp 1bit | KL llp llama.cpp | top llp 1bit | top llp llama.cpp | KL 1bp 1bit | KL 1bp llama.cpp | top 1bp 1bit | top 1bp llama.cpp |"
QSEP="| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"

if on 4; then
echo "## 4. Quality: weight error against the source, and (demo model) KL divergence against f16"
echo
if [ "$KL" = 1 ] && [ -n "${SRC[demo]:-}" ]; then
    echo "KL columns: mean KL divergence / same-top-token % over $CHUNKS chunks of 512 tokens of \`$TEXT\` (second halves),"
    echo "measured by llama.cpp's llama-perplexity (llp) and by \`1bit perplexity\` (1bp) against the f16 model's own run in each engine."
    echo
fi
echo "$QHEAD"
echo "$QSEP"
for m in random256 demo; do
    [ -n "${SRC[$m]:-}" ] || continue
    for sp in $SPECS; do
        tag=$(echo "$sp" | tr ':' '-'); a=$OUT/$m-ob-$tag.gguf; b=$OUT/$m-ll-$tag.gguf
        [ -f "$a" ] && [ -f "$b" ] && quality_row "$m" "$(label "$sp")" "$a" "$b"
    done
done
echo
fi

# ---- with an importance matrix -------------------------------------------------------------------
if on 5 && [ "$IMATRIX" = 1 ] && [ -n "${SRC[demo]:-}" ]; then
    IMTEXT=${IMTEXT:-$OUT/imatrix-text.txt}
    TRAIN=${TRAIN:-build/corpus/out/train.jsonl.gz}
    [ -s "$IMTEXT" ] || [ -f "$TRAIN" ] || die "no $TRAIN for the importance matrix text: set IMTEXT (a text file) or TRAIN"
    [ -s "$IMTEXT" ] || zcat "$TRAIN" | python3 -c '
import json, sys
n = 0
for line in sys.stdin:
    t = json.loads(line).get("text") or ""
    sys.stdout.write(t + "\n\n"); n += len(t)
    if n > 300000: break' >"$IMTEXT"
    "$OUT/make_imatrix" -m "${SRC[demo]}" -f "$IMTEXT" -o "$OUT/demo.imatrix" --chunks 16 --threads "$THREADS" >"$OUT/imatrix.log" 2>&1 ||
        die "make_imatrix failed: $(tail -1 "$OUT/imatrix.log")"
    echo "## 5. The demo model with an importance matrix (the same file for both quantizers)"
    echo
    echo "\`tools/compat/make_imatrix\` over 16 chunks of 512 tokens of \`$IMTEXT\` (training text, not the KL text)."
    echo "RMSE columns: importance-weighted (sqrt(sum imp*d^2 / sum imp)); KL columns as in section 4."
    echo
    echo "$QHEAD"
    echo "$QSEP"
    for sp in ${IMSPECS:-pure:Q4_0 pure:Q4_1 pure:Q5_0 pure:Q5_1 pure:IQ4_NL pure:IQ4_XS pure:Q2_K pure:Q3_K pure:Q4_K pure:Q5_K pure:Q6_K mix:Q4_K_M mix:Q2_K_S mix:Q3_K_M}; do
        n=${sp#*:}; tag=$(echo "$sp" | tr ':' '-'); a=$OUT/demo-obi-$tag.gguf; b=$OUT/demo-lli-$tag.gguf
        "$QUANTIZE" --imatrix "$OUT/demo.imatrix" $(flags "$sp") "${SRC[demo]}" "$b" "$n" "$THREADS" >"$OUT/demo-lli-$tag.log" 2>&1 || rm -f "$b"
        $OB quantize --imatrix "$OUT/demo.imatrix" $(flags "$sp") "${SRC[demo]}" "$a" "$n" "$THREADS" >"$OUT/demo-obi-$tag.log" 2>&1 || rm -f "$a"
        [ -f "$a" ] && [ -f "$b" ] && quality_row demo "$(label "$sp")" "$a" "$b" --imatrix "$OUT/demo.imatrix"
    done
    echo
fi
