#!/bin/sh
# The CPU speed benchmark (docs/bench.md, "CPU speed"): `1bit bench` against llama.cpp's
# llama-bench on the same random-weight GGUF files, same -p/-n/-t, engines alternating run by
# run (so load from other jobs on the machine hits both alike), with each run's peak resident
# memory from /usr/bin/time -v. I2_S is timed against bitnet.cpp (its llama-cli's timings) on
# the same file. tg rows also show the roofline: this machine's read bandwidth (bench/membw.c)
# over the bytes one decoded token reads, i.e. the fastest possible tg, and 1bit's share of it.
#
#   LLAMA_BENCH  llama-bench (default ../peers/llama.cpp/build/bin/llama-bench)
#   BITNET_CLI   bitnet.cpp's llama-cli (default ../peers/BitNet/build/bin/llama-cli; skipped if absent)
#   MODELS       folder of the generated models (default /work/models)
#   REPS         runs per engine and test (default 3; the table shows the median)
#   THREADS      thread counts (default "1 2"); P (512), N (128); TESTS: "pp tg" (default), "pp" or "tg"
#   ONLY         space-separated subset of the file names below (default: all)
#   OB_REV       revision to print for OB (default: git HEAD)
#   NICE         prefix for every timed command (default "nice -n -20" when root, else none): on a
#                shared machine it gives both engines the cores over other jobs, equally
# llama-bench runs with bench/noamx.c preloaded: its AMX buffer type crashes on this machine
# (docs/compat.md); the shim disables only that (its CPU_REPACK kernels stay on).
set -eu
cd "$(dirname "$0")/.."
# OB: the 1bit binary to time (default: build/1bit, rebuilt first). On a machine where others
# rebuild build/1bit meanwhile, freeze a copy: cp build/1bit build/1bit-bench; OB=build/1bit-bench
OB=${OB:-./build/1bit}
LB=${LLAMA_BENCH:-../peers/llama.cpp/build/bin/llama-bench}
BN=${BITNET_CLI:-../peers/BitNet/build/bin/llama-cli}
M=${MODELS:-/work/models}
REPS=${REPS:-3}; THREADS=${THREADS:-"1 2"}; P=${P:-512}; N=${N:-128}; TESTS=${TESTS:-"pp tg"}
if [ "$(id -u)" = 0 ]; then NICE=${NICE-"nice -n -20"}; else NICE=${NICE-}; fi
mkdir -p "$M" build
[ "$OB" != ./build/1bit ] || make -s build/1bit
cc -O2 -pthread -o build/membw bench/membw.c
cc -O2 -shared -fPIC -o build/noamx.so bench/noamx.c -ldl
cc -O2 -Isrc -Iinclude -o build/kbench bench/kbench.c build/lib1bit.a -lm -pthread
NOAMX=$(pwd)/build/noamx.so
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# ---- models --------------------------------------------------------------------------------
random() { [ -f "$M/$2" ] || $OB convert --random "bench/configs/$1" -o "$M/$2" --type "$3" >&2; }
quant() { [ -f "$M/$2" ] || $OB quantize "$M/$1" "$M/$2" "$3" >&2; }
random llama-3.2-1b.json llama-3.2-1b-f16.gguf f16
random qwen3-0.6b.json qwen3-0.6b-f16.gguf f16
for t in Q4_0 Q4_K_M Q8_0; do
    lt=$(echo $t | tr A-Z a-z)
    quant llama-3.2-1b-f16.gguf llama-3.2-1b-$lt.gguf $t
    quant qwen3-0.6b-f16.gguf qwen3-0.6b-$lt.gguf $t
done
for t in tq2_0 tq1_0 i2_s; do random bitnet-2b-llamacpp-arch.json bitnet-2b-llamacpp-$t.gguf $t; done
FILES=${ONLY:-"bitnet-2b-llamacpp-tq2_0.gguf bitnet-2b-llamacpp-i2_s.gguf llama-3.2-1b-q4_0.gguf
llama-3.2-1b-q4_k_m.gguf llama-3.2-1b-q8_0.gguf bitnet-2b-llamacpp-tq1_0.gguf
qwen3-0.6b-q4_0.gguf qwen3-0.6b-q4_k_m.gguf qwen3-0.6b-q8_0.gguf"}

# ---- one run: prints "<tokens/s> <peak RSS MiB>" --------------------------------------------
rss() { sed -n 's/.*Maximum resident set size (kbytes): *\([0-9]*\).*/\1/p' "$1" | awk '{printf "%.0f", $1 / 1024}'; }
avg_ts() { sed -n 's/.*"avg_ts": *\([0-9.e+-]*\).*/\1/p' "$1" | head -1 | awk '{printf "%.2f", $1}'; }
run_llama() { # file test threads
    case $2 in pp*) a="-p ${2#pp} -n 0";; *) a="-p 0 -n ${2#tg}";; esac
    LD_PRELOAD=$NOAMX $NICE /usr/bin/time -v -o "$TMP/t" $LB -m "$M/$1" $a -r 1 -t $3 -o jsonl >"$TMP/o" 2>/dev/null || { echo "fail -"; return; }
    echo "$(avg_ts "$TMP/o") $(rss "$TMP/t")"
}
run_1bit() {
    case $2 in pp*) a="-p ${2#pp} -n 0";; *) a="-p 0 -n ${2#tg}";; esac
    $NICE /usr/bin/time -v -o "$TMP/t" $OB bench -m "$M/$1" $a -r 1 -t $3 -o jsonl >"$TMP/o" 2>/dev/null || { echo "fail -"; return; }
    echo "$(avg_ts "$TMP/o") $(rss "$TMP/t")"
}
run_bitnet() { # bitnet.cpp's llama-cli: its own timings of prompt eval (pp) and eval (tg)
    [ -x "$BN" ] || { echo "absent -"; return; }
    # "hi" words are two tokens each in these files' byte-level vocabulary: a ppN prompt of N/2
    # words is N tokens plus BOS (llama-cli prints the count it timed)
    case $2 in pp*) k="prompt eval"; set -- "$1" "$2" "$3" -n 1 -p "$(python3 -c "print(' '.join(['hi'] * (${2#pp} // 2)))")";;
               *) k=eval; set -- "$1" "$2" "$3" -n "${2#tg}" -p hi;; esac
    bf=$1 bt=$3; shift 3
    $NICE /usr/bin/time -v -o "$TMP/t" $BN -m "$M/$bf" "$@" -t $bt -c $((2 * P + N + 16)) --temp 0 --ignore-eos >/dev/null 2>"$TMP/o" || { echo "fail -"; return; }
    ts=$(grep -E "llama_perf_context_print: +$k time|llama_print_timings: +$k time" "$TMP/o" | sed -n 's/.*( *[0-9.]* ms per token, *\([0-9.]*\) tokens per second).*/\1/p' | tail -1)
    echo "${ts:-fail} $(rss "$TMP/t")"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -sr)"
echo "1bit: ${OB_REV:-$(git rev-parse --short HEAD)} (CPU kernels: $(./build/kbench q4_0 32 16 1 -r 1 | cut -d' ' -f1))   llama.cpp: $(LD_PRELOAD=$NOAMX $LB -m "$M/qwen3-0.6b-q4_0.gguf" -p 1 -n 0 -r 1 2>&1 | sed -n 's/^build: \([0-9a-f]*\).*/\1/p' | head -1)"
echo "REPS=$REPS P=$P N=$N THREADS=\"$THREADS\" NICE=\"$NICE\""
echo
echo "### Side by side (median of $REPS alternating runs; RSS = peak resident MiB of the run)"
echo
echo "tg bound = read bandwidth (bench/membw.c, buffer of the bytes one token reads, same threads, measured"
echo "just before the file's runs) / bytes read per token (bench/gguf_bytes.py)."
echo
echo "| file | test | threads | llama.cpp t/s | 1bit t/s | 1bit / llama.cpp | tg bound t/s (GB/s) | 1bit % of bound | RSS llama.cpp | RSS 1bit |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for f in $FILES; do
    [ -f "$M/$f" ] || continue
    other=llama
    case $f in *i2_s*) other=bitnet;; esac
    bytes=$(python3 bench/gguf_bytes.py "$M/$f" | cut -d' ' -f1)
    for t in $THREADS; do
        bw=$($NICE ./build/membw -s $((bytes / 1048576)) -t $t -r 5 2>/dev/null | awk -F'|' '/^\| [0-9]/ {gsub(/ /, "", $4); print $4}')
        bound=$(awk -v b=$bytes -v g=$bw 'BEGIN {printf "%.2f", g * 1e9 / b}')
        for test in $(for x in $TESTS; do case $x in pp) echo pp$P;; tg) echo tg$N;; esac; done); do
            : >"$TMP/a"; : >"$TMP/b"
            for r in $(seq "$REPS"); do
                run_$other "$f" $test $t >>"$TMP/a"
                run_1bit "$f" $test $t >>"$TMP/b"
            done
            la=$(cut -d' ' -f1 "$TMP/a" | grep -E '^[0-9.]+$' | median); ob=$(cut -d' ' -f1 "$TMP/b" | grep -E '^[0-9.]+$' | median)
            ra=$(cut -d' ' -f2 "$TMP/a" | grep -E '^[0-9]+$' | sort -n | tail -1); rb=$(cut -d' ' -f2 "$TMP/b" | grep -E '^[0-9]+$' | sort -n | tail -1)
            ratio=$(awk -v a="$la" -v b="$ob" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", b / a; else print "-"}')
            name=$f; [ $other = bitnet ] && name="$f (vs bitnet.cpp)"
            pct=-; bnd=-
            case $test in tg*) bnd="$bound ($bw)"; pct=$(awk -v o="$ob" -v b="$bound" 'BEGIN {if (o + 0 > 0 && b + 0 > 0) printf "%.0f%%", 100 * o / b; else print "-"}');; esac
            echo "| $name | $test | $t | $la | $ob | $ratio | $bnd | $pct | ${ra:--} | ${rb:--} |"
        done
    done
done
