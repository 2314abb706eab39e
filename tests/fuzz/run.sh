#!/bin/sh
# run.sh — runs one libFuzzer harness of tests/fuzz with the project's standard options.
#
#   tests/fuzz/run.sh NAME SECONDS [BUILD]      e.g. tests/fuzz/run.sh gguf 60
#
# NAME is the harness without its fuzz_ prefix. The corpus grows in BUILD/fuzz/corpus-NAME
# (seeded from tests/fuzz/seeds-NAME when that exists, and tests/fuzz/NAME.dict is the dictionary
# when present); the log is BUILD/fuzz/NAME.log and its last lines (executions, coverage) are
# printed. The binary is copied first, so a rebuild during a long run does not disturb it. Exit
# status: libFuzzer's (0: no finding; a finding leaves crash-*/leak-*/timeout-* in BUILD/fuzz/).
# docs/reliability.md logs the runs.
set -eu
name=$1; secs=$2; build=${3:-build}
bin=$build/fuzz/fuzz_$name
[ -x "$bin" ] || { echo "run.sh: $bin missing (make fuzz)" >&2; exit 2; }
corpus=$build/fuzz/corpus-$name
mkdir -p "$corpus" "$build/fuzz/run"
cp "$bin" "$build/fuzz/run/fuzz_$name"
set -- "$corpus"
[ -d "tests/fuzz/seeds-$name" ] && set -- "$@" "tests/fuzz/seeds-$name"
[ -f "tests/fuzz/$name.dict" ] && set -- "$@" "-dict=tests/fuzz/$name.dict"
# json_schema writes its own seeds into the corpus (its header says why).
[ "$name" = json_schema ] && export OB_FUZZ_SEEDS="$corpus"
# Files (GGUF, safetensors) need room for a small header plus tensor data; text inputs do not.
case $name in gguf|safetensors) maxlen=65536 ;; *) maxlen=8192 ;; esac
log=$build/fuzz/$name.log
rc=0
"$build/fuzz/run/fuzz_$name" "$@" -max_total_time="$secs" -timeout=60 -rss_limit_mb=2048 \
    -max_len=$maxlen -artifact_prefix="$build/fuzz/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
grep -E '^#[0-9]+.*(DONE|pulse|NEW)' "$log" | tail -1
grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY' "$log" || true
echo "fuzz_$name: ${secs}s, exit $rc"
exit $rc
