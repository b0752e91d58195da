# Shared by bench/vs-llamacpp and bench/vs-ik (sourced): how latte and mainline llama.cpp
# run each test, and how their output is read. The caller sets model (the latte model
# directory), gguf (the GGUF prefix), llama_bin, latte, threads and out.

# The last JSON line's field; the mean of llama-bench's per-repetition samples (JSON
# lines); the S_TG of llama-batched-bench's row with $1 sequences (JSON lines).
json_field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
llama_bench_ts() { python3 -c "
import json, sys, statistics
rows = [json.loads(l) for l in sys.stdin if l.strip().startswith('{')]
print(statistics.mean(rows[-1]['samples_ts']))"; }
batched_speed_tg() { python3 -c "
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip().startswith('{')]
print([r for r in rows if r['pl'] == $1][-1]['speed_tg'])"; }

# A test is NAME or NAME:TYPE (tg128:Q4_K_M): TYPE names the GGUF file $gguf-TYPE.gguf
# that every engine reads, latte too; without it latte reads its model directory and
# the peers the bf16 file.
test_name() { echo "${1%%:*}"; }
test_type() { case $1 in *:*) echo "${1#*:}" ;; *) echo bf16 ;; esac; }

run_latte() {  # test -> tok/s
  local weights=$model
  case $1 in *:*) weights="$gguf-$(test_type "$1").gguf" ;; esac
  local args=(bench model --model "$weights" --huge-pages -t "$threads" --json)
  case $(test_name "$1") in
    tg128) args+=(-p 0 -n 128 -r 3) ;;
    pp512) args+=(-p 512 -n 0 -r 3) ;;
    fp8) args+=(--quantize fp8 -p 0 -n 128 -r 3) ;;
    q4) run_latte tg128:Q4_K_M; return ;;  # latte reads the Q4_K_M file itself
    d8192) args+=(-p 0 -d 8192 -n 64 -r 2) ;;
    d32768) args+=(-p 0 -d 32768 -n 64 -r 1) ;;
    batch16) args+=(-p 0 -n 128 -r 2 --batch 16) ;;
  esac
  # vs-ik's PROBE=1: latte's tg runs also take the read probe beside each timed run.
  case $(test_name "$1") in tg128 | fp8 | d8192 | d32768 | batch16) [ -n "${probe:-}" ] && args+=(--paired-probe) ;; esac
  "$latte" "${args[@]}" 2>>"$out/latte.stderr" | tee -a "$out/latte.jsonl" | json_field tok_s_mean
}

run_llama() {  # test -> tok/s
  local bench=("$llama_bin/llama-bench" -t "$threads" --load-mode none -o jsonl)
  local file="$gguf-$(test_type "$1").gguf"
  case $(test_name "$1") in
    tg128) "${bench[@]}" -m "$file" -p 0 -n 128 -r 3 ;;
    pp512) "${bench[@]}" -m "$file" -p 512 -n 0 -r 3 ;;
    fp8) "${bench[@]}" -m "$gguf-Q8_0.gguf" -p 0 -n 128 -r 3 ;;
    q4) "${bench[@]}" -m "$gguf-Q4_K_M.gguf" -p 0 -n 128 -r 3 ;;
    d8192) "${bench[@]}" -m "$file" -p 0 -n 64 -d 8192 -r 2 ;;
    d32768) "${bench[@]}" -m "$file" -p 0 -n 64 -d 32768 -r 1 ;;
    batch16) "$llama_bin/llama-batched-bench" -m "$file" -t "$threads" -tb "$threads" --load-mode none \
               -c 4608 -npp 128 -ntg 128 -npl 16 --output-format jsonl ;;
  esac 2>>"$out/llama.stderr" | tee -a "$out/llama.jsonl" |
    if [ "$(test_name "$1")" = batch16 ]; then batched_speed_tg 16; else llama_bench_ts; fi
}

machine() {
  "$latte" bench machine -t "$threads" 2>/dev/null | tee -a "$out/machine.txt"
}
