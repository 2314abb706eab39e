#!/usr/bin/env bash
# compat.sh — GGUF compatibility between 1bit and llama.cpp (docs/compat.md).
#
# Owns: building our two small programs (llama_logits.c against an EXISTING llama.cpp build,
# ob_logits.c against build/lib1bit.a, both with logits_common.c), converting every golden
# model with `1bit convert` to each weight type, running both engines on the golden tokens,
# and printing Markdown tables of llama.cpp vs 1bit vs transformers
# (tests/golden/<arch>/logits.f32). Also: llama.cpp on its
# own f32 dequantization of each file (do both engines decode the weights alike?), our tensor
# bytes against llama-quantize's, llama.cpp with its default f16 KV cache, llama.cpp's
# tokenizer on the golden texts, files written by llama-quantize loaded in 1bit, and the
# ternary layouts (tq1_0/tq2_0) on a random llama-arch model.
# Does not own: building llama.cpp (a peer: build it yourself, then point LLAMA_DIR at it),
# the comparison arithmetic (compare.py).
#
# Usage:  tools/compat/compat.sh > report.md     (from anywhere; takes about a minute)
# Environment:
#   LLAMA_DIR   llama.cpp checkout with a CMake build in LLAMA_DIR/build (default ../peers/llama.cpp)
#   OUT         scratch folder (default build/compat)
#   ARCHS       golden models (default "llama mistral qwen2 qwen3 bitnet")
#   TYPES       weight types (default "f32 f16 bf16 q8_0 q4_0"; bitnet also gets tq1_0 tq2_0)
#   THREADS     CPU threads for both engines (default 2)
#   LLAMA_ARGS  extra arguments for llama_logits, e.g. "--override-kv KEY=str:VALUE"
#               (diagnosis only; the run header then says so)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
LLAMA_DIR=${LLAMA_DIR:-$ROOT/../peers/llama.cpp}
LLAMA_DIR=$(cd "$LLAMA_DIR" 2>/dev/null && pwd) || { echo "compat.sh: LLAMA_DIR does not exist" >&2; exit 1; }
OUT=${OUT:-build/compat}
ARCHS=${ARCHS:-"llama mistral qwen2 qwen3 bitnet"}
TYPES=${TYPES:-"f32 f16 bf16 q8_0 q4_0"}
THREADS=${THREADS:-2}
LLAMA_ARGS=${LLAMA_ARGS:-}
LLBIN=$LLAMA_DIR/build/bin
QUANTIZE=$LLBIN/llama-quantize
CMP="python3 tools/compat/compare.py"

die() { echo "compat.sh: $*" >&2; exit 1; }
[ -f "$LLBIN/libllama.so" ] || die "no $LLBIN/libllama.so: build llama.cpp first (this script never builds it)"
[ -f "$LLAMA_DIR/include/llama.h" ] || die "no $LLAMA_DIR/include/llama.h"
[ -x "$QUANTIZE" ] || die "no $QUANTIZE"
mkdir -p "$OUT"

# ---- build our programs -------------------------------------------------------------------
make -s build/1bit build/lib1bit.a >"$OUT/make.log" 2>&1 || { cat "$OUT/make.log" >&2; die "make build/1bit failed"; }
cc -O2 -Wall -Wextra -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" tools/compat/llama_logits.c tools/compat/logits_common.c \
   -o "$OUT/llama_logits" -L"$LLBIN" -lllama -lggml -lggml-base -Wl,-rpath,"$LLBIN" || die "building llama_logits failed"
cc -O2 -Wall -Wextra -std=c17 -D_GNU_SOURCE -Iinclude tools/compat/ob_logits.c tools/compat/logits_common.c build/lib1bit.a \
   -ljansson -lpcre2-8 -lm -pthread -o "$OUT/ob_logits" || die "building ob_logits failed"

# ---- where and what ---------------------------------------------------------------------
echo "## Run"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(. /etc/os-release; echo "$PRETTY_NAME") $(uname -m)," \
     "kernel $(uname -r); CPU flags: $(for fl in avx2 fma f16c avx512f avx512_bf16 avx512_vnni amx_int8; do
         grep -qw "$fl" /proc/cpuinfo && printf '%s ' "$fl"; done | xargs)"
echo "- 1bit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src include 2>/dev/null && [ -z "$(git status --porcelain -- src include 2>/dev/null)" ] || echo ' + uncommitted changes in src/ include/')"
echo "- llama.cpp: $(git -C "$LLAMA_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown), CPU backend, $THREADS threads"
echo "- llama_logits: KV cache f32, flash attention off, no extra buffer types (AMX/repack)$( [ -n "$LLAMA_ARGS" ] && echo "; extra args \`$LLAMA_ARGS\`")"
echo

# llama.cpp's reason for refusing a file: the last "error loading model" line of its log.
llama_err() { sed -n 's/.*error loading model: //p' "$1" | tail -1; }

# run_pair TAG LLAMA_GGUF OB_GGUF TOKENS N_VOCAB HF ARCH TYPE NOTE [llama_logits args...]
# llama.cpp runs LLAMA_GGUF, 1bit runs OB_GGUF (the same file except in the dequantization check).
run_pair() {
    local tag=$1 llgguf=$2 obgguf=$3 toks=$4 nv=$5 hf=$6 arch=$7 type=$8 note=$9
    shift 9
    local rc why
    # A subshell each, so that a crash is reported as a status, not by bash's job messages.
    ( exec "$OUT/llama_logits" "$llgguf" -t "$toks" -o "$OUT/$tag.ll.f32" --threads "$THREADS" $LLAMA_ARGS "$@" ) \
        >"$OUT/$tag.ll.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        why=$(llama_err "$OUT/$tag.ll.log")
        [ -n "$why" ] || why=$(tail -1 "$OUT/$tag.ll.log")
        [ $rc -gt 128 ] && why="killed by signal $((rc - 128)) $why"
        rm -f "$OUT/$tag.ll.f32"
        note="${note:+$note; }llama.cpp: $why"
    fi
    ( exec "$OUT/ob_logits" "$obgguf" -t "$toks" -o "$OUT/$tag.ob.f32" --threads "$THREADS" ) >"$OUT/$tag.ob.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        why=$(tail -1 "$OUT/$tag.ob.log")
        [ $rc -gt 128 ] && why="killed by signal $((rc - 128)) $why"
        rm -f "$OUT/$tag.ob.f32"
        note="${note:+$note; }1bit: $why"
    fi
    $CMP row "$arch" "$type" "$nv" "$OUT/$tag.ll.f32" "$OUT/$tag.ob.f32" "$hf" "$note"
}

n_vocab_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$1"; }
types_of() { local t=$TYPES; [ "$1" = bitnet ] && t="$t tq1_0 tq2_0"; echo "$t"; }

# A random llama-arch model with rows of 256 (ternary blocks are 256 wide; the goldens' 64 are not).
cat >"$OUT/random256.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "bos_token_id": 318, "eos_token_id": 319, "tie_word_embeddings": false}
EOF

# ---- 1. files written by 1bit convert ------------------------------------------------------
echo "## 1. GGUF written by \`1bit convert\`: logits of the golden tokens"
echo
$CMP header
for arch in $ARCHS; do
    g=tests/golden/$arch
    [ -f "$g/logits.f32" ] || { echo "| $arch | - | | | | | | | no golden model in $g |"; continue; }
    nv=$(n_vocab_of "$g/config.json")
    for type in $(types_of "$arch"); do
        f=$OUT/$arch-$type.gguf
        if ! ./build/1bit convert "$g" -o "$f" --type "$type" >"$OUT/$arch-$type.convert.log" 2>&1; then
            echo "| $arch | $type | | | | | | | convert failed: $(tail -1 "$OUT/$arch-$type.convert.log") |"
            rm -f "$f"
            continue
        fi
        run_pair "$arch-$type" "$f" "$f" "$g/tokens.json" "$nv" "$g/logits.f32" "$arch" "$type" ""
    done
done
for type in f32 tq1_0 tq2_0; do
    f=$OUT/random256-$type.gguf
    if ! ./build/1bit convert --random "$OUT/random256.json" -o "$f" --type "$type" >"$OUT/random256-$type.convert.log" 2>&1; then
        echo "| random256 | $type | | | | | | | convert failed: $(tail -1 "$OUT/random256-$type.convert.log") |"
        rm -f "$f"
        continue
    fi
    run_pair "random256-$type" "$f" "$f" tests/golden/llama/tokens.json 320 "" random256 "$type" "random weights, no HF reference"
done
echo

# ---- 2. both engines decode the weights alike ----------------------------------------------
echo "## 2. llama.cpp on its own f32 dequantization of each file (\`llama-quantize --allow-requantize F T.gguf F32\`) vs 1bit on the file itself"
echo
$CMP header
for arch in $ARCHS random256; do
    if [ "$arch" = random256 ]; then types="tq1_0 tq2_0"; toks=tests/golden/llama/tokens.json; nv=320; hf=""
    else g=tests/golden/$arch; types=$(types_of "$arch"); toks=$g/tokens.json; nv=$(n_vocab_of "$g/config.json"); hf=$g/logits.f32; fi
    for type in $types; do
        [ "$type" = f32 ] && continue
        f=$OUT/$arch-$type.gguf
        [ -f "$f" ] || continue
        d=$OUT/$arch-$type-deq-f32.gguf
        if ! "$QUANTIZE" --allow-requantize "$f" "$d" F32 "$THREADS" >"$OUT/$arch-$type-deq.log" 2>&1; then
            why=$(grep -m1 -iE 'error|failed|unknown' "$OUT/$arch-$type-deq.log" | sed 's/.*failed to quantize: //')
            case $why in *"unknown model architecture"*)
                echo "| $arch | all | | | | | | | llama-quantize cannot read the file: $why |"; break ;; esac
            echo "| $arch | $type | | | | | | | llama-quantize could not dequantize: $why |"
            continue
        fi
        # And 1bit itself on that F32 file: does 1bit's result depend on anything but the decoded weights?
        "$OUT/ob_logits" "$f" -t "$toks" -o "$OUT/$arch-$type-q.ob.f32" --threads "$THREADS" >/dev/null 2>&1
        "$OUT/ob_logits" "$d" -t "$toks" -o "$OUT/$arch-$type-deq.obf32.f32" --threads "$THREADS" >/dev/null 2>&1
        same=$($CMP pair "$nv" "$OUT/$arch-$type-q.ob.f32" "$OUT/$arch-$type-deq.obf32.f32" | sed 's/ top1.*//; s/max_abs_diff /max abs /')
        run_pair "$arch-$type-deq" "$d" "$f" "$toks" "$nv" "$hf" "$arch" "$type" \
            "llama.cpp runs the F32 dequantization; 1bit on it vs 1bit on the file: $same"
    done
done
echo

# ---- 3. our quantizers against llama.cpp's ----------------------------------------------
echo "## 3. Tensor bytes: \`1bit convert --type T\` vs \`llama-quantize\` of our f32 file to T"
echo
echo "| arch | type | tensors of the same name and type |"
echo "| --- | --- | --- |"
for arch in $ARCHS random256; do
    [ -f "$OUT/$arch-f32.gguf" ] || continue
    if [ "$arch" = random256 ]; then types="tq1_0 tq2_0"; else types=$(types_of "$arch"); fi
    for type in $types; do
        [ "$type" = f32 ] && continue
        f=$OUT/$arch-$type.gguf
        [ -f "$f" ] || continue
        q=$OUT/$arch-llq-$type.gguf
        QT=$(echo "$type" | tr a-z A-Z)
        if ! "$QUANTIZE" "$OUT/$arch-f32.gguf" "$q" "$QT" "$THREADS" >"$OUT/$arch-llq-$type.log" 2>&1; then
            why=$(grep -m1 -iE 'error|failed|unknown' "$OUT/$arch-llq-$type.log" | sed 's/.*failed to quantize: //')
            case $why in *"unknown model architecture"*)
                echo "| $arch | all | llama-quantize cannot read the file: $why |"; break ;; esac
            echo "| $arch | $type | llama-quantize failed: $why |"
            continue
        fi
        echo "| $arch | $type | $($CMP bytes "$f" "$q") (llama-quantize chose: $($CMP types "$q")) |"
    done
done
echo

# ---- 4. llama.cpp with its own defaults (f16 KV cache, flash attention on) ---------------
echo "## 4. The f32 files again, llama.cpp with its default f16 KV cache and flash attention on"
echo
$CMP header
for arch in $ARCHS; do
    g=tests/golden/$arch
    f=$OUT/$arch-f32.gguf
    [ -f "$f" ] || continue
    run_pair "$arch-f32-kvf16" "$f" "$f" "$g/tokens.json" "$(n_vocab_of "$g/config.json")" "$g/logits.f32" "$arch" f32 \
        "llama.cpp kv f16, fa on" --kv f16 --fa on
done
echo

# ---- 5. tokenizer ------------------------------------------------------------------------
echo "## 5. llama.cpp's tokenizer, loading our files, on the golden texts (tests/golden/tokenizer_check.json)"
echo
for arch in $ARCHS; do
    f=$OUT/$arch-f32.gguf
    [ -f "$f" ] || continue
    echo "- $arch: $($CMP tokcheck "$OUT/llama_logits" "$f" tests/golden/tokenizer_check.json $LLAMA_ARGS 2>&1 |
                     tr '\n' ' ' | sed 's/ *$//')"
done
echo

# ---- 6. files written by llama.cpp (llama-quantize of our f32 file) ------------------------
echo "## 6. GGUF written by llama.cpp's \`llama-quantize\` (from our f32 file, its default tensor types) in both engines"
echo
echo "Rows noted \"llama.cpp runs the F32 dequantization\": llama.cpp on \`llama-quantize --allow-requantize\` of that file to F32, 1bit on the file itself."
echo
$CMP header
for arch in $ARCHS; do
    g=tests/golden/$arch
    for type in q8_0 q4_0; do
        f=$OUT/$arch-llq-$type.gguf
        [ -f "$f" ] || continue
        run_pair "$arch-llq-$type" "$f" "$f" "$g/tokens.json" "$(n_vocab_of "$g/config.json")" "$g/logits.f32" "$arch" \
            "$(echo "$type" | tr a-z A-Z) (llama-quantize)" "tensors: $($CMP types "$f")"
        # Does 1bit decode llama.cpp's file as llama.cpp does? llama.cpp on its own F32 dequantization.
        d=$OUT/$arch-llq-$type-deq-f32.gguf
        "$QUANTIZE" --allow-requantize "$f" "$d" F32 "$THREADS" >"$OUT/$arch-llq-$type-deq.log" 2>&1 || continue
        run_pair "$arch-llq-$type-deq" "$d" "$f" "$g/tokens.json" "$(n_vocab_of "$g/config.json")" "$g/logits.f32" "$arch" \
            "$(echo "$type" | tr a-z A-Z) (llama-quantize)" "llama.cpp runs the F32 dequantization"
    done
done
for type in tq1_0 tq2_0; do
    QT=$(echo "$type" | tr a-z A-Z)
    f=$OUT/random256-llq-$type.gguf
    [ -f "$f" ] || continue
    run_pair "random256-llq-$type" "$f" "$f" tests/golden/llama/tokens.json 320 "" random256 \
        "$QT (llama-quantize)" "tensors: $($CMP types "$f")"
    # The same with f16 embedding and output, the layout `1bit convert --type tq*` writes.
    f=$OUT/random256-llq16-$type.gguf
    "$QUANTIZE" --token-embedding-type f16 --output-tensor-type f16 "$OUT/random256-f32.gguf" "$f" "$QT" "$THREADS" \
        >"$OUT/random256-llq16-$type.log" 2>&1 || { echo "| random256 | $QT | | | | | | | llama-quantize failed |"; continue; }
    run_pair "random256-llq16-$type" "$f" "$f" tests/golden/llama/tokens.json 320 "" random256 \
        "$QT (llama-quantize, f16 embd/output)" "tensors: $($CMP types "$f")"
    d=$OUT/random256-llq16-$type-deq-f32.gguf
    "$QUANTIZE" --allow-requantize "$f" "$d" F32 "$THREADS" >"$OUT/random256-llq16-$type-deq.log" 2>&1 || continue
    run_pair "random256-llq16-$type-deq" "$d" "$f" tests/golden/llama/tokens.json 320 "" random256 \
        "$QT (llama-quantize, f16 embd/output)" "llama.cpp runs the F32 dequantization"
done
