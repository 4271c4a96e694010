#!/usr/bin/env bash
# bench/gpu_decode.sh - single-stream decode on the GPU against the memory-read ceiling
# measured in the same run, and what a verification forward costs against a one-token
# step (issue 22's benchmark), for a Qwen2.5-7B-shaped model with random weights
# (bench/make_bench_model.py --shape 7b: hidden 3584, 28 layers, 28/4 heads, MLP 18944,
# vocab 152064, untied, q/k/v bias) in BF16, Q8_0, Q4_0 and Q4_K (--quant at load).
#
# Per type: step-bench --batch 1 --ctx 512 (a decode step after a 512-token prompt:
# tok/s = 1 / median step), the ceiling = (read bandwidth of gpu-bw-bench, the
# project's own streaming-read kernel) / (weight bytes a step reads), and verify-bench
# --ctx 512 (a forward of n tokens of one sequence against n = 1; "argmax": every row
# reduced on the GPU, what greedy verification needs).
#
# Usage: bench/gpu_decode.sh BUILD OUT [TYPES]   (BUILD: a CUDA build folder; TYPES:
#        comma list of bf16,q8,q4,q4k, default all). Logs in OUT/, a table on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?BUILD}
out=${2:?OUT}
types=${3:-bf16,q8,q4,q4k}
mkdir -p "$out"
model=${RP_BENCH_7B:-/tmp/qwen2.5-7b-random}
if [ ! -f "$model/model.safetensors" ]; then
    /usr/bin/time -f "made the model in %e s" python3 bench/make_bench_model.py "$model" --shape 7b \
        > "$out/make_model.log" 2>&1 || { echo "gpu-decode: making the model failed"; cat "$out/make_model.log"; exit 1; }
fi
"$build/bench/gpu-bw-bench" --gib 8 --runs 20 | tee "$out/bw.log"
bw=$(sed -n 's/.*median \([0-9.]*\) GB\/s.*/\1/p' "$out/bw.log")
printf '| type | weights/step | ceiling | decode | of ceiling | verify 16 / 1 (logits) | verify 16 / 1 (argmax) |\n'
printf '|---|---|---|---|---|---|---|\n'
for t in ${types//,/ }; do
    q=()
    [ "$t" = q8 ] && q=(--quant q8)
    [ "$t" = q4 ] && q=(--quant q4)
    [ "$t" = q4k ] && q=(--quant q4k) # every matrix Q4_K (a Q4_K_M file mixes in Q6_K)
    log="$out/step-$t.log"
    timeout 400 "$build/bench/step-bench" "$model" --device cuda --batch 1 --ctx 512 --steps 40 "${q[@]}" > "$log" 2>&1
    mb=$(sed -n 's/.*weights read per step \([0-9.]*\) MB.*/\1/p' "$log")
    ms=$(sed -n 's/^| 1 | [0-9.]* ms | \([0-9.]*\) ms .*/\1/p' "$log")
    vlog="$out/verify-$t.log"
    timeout 400 "$build/bench/verify-bench" "$model" --device cuda --ctx 512 --max 16 --reps 15 "${q[@]}" > "$vlog" 2>&1
    v16=$(awk '$1 == 16 { r = $4 } END { print r }' "$vlog")
    a16=$(awk '$1 == 16 { r = $12 } END { print r }' "$vlog")
    if [ -n "$mb" ] && [ -n "$ms" ] && [ -n "$bw" ]; then
        awk -v t="$t" -v mb="$mb" -v ms="$ms" -v bw="$bw" -v v="$v16" -v a="$a16" 'BEGIN {
            ceil = bw * 1e3 / mb; tps = 1e3 / ms
            printf "| %s | %.0f MB | %.1f tok/s | %.1f tok/s (%.3f ms) | %.1f%% | %s | %s |\n", t, mb, ceil, tps, ms,
                100 * tps / ceil, v, a }'
    else
        echo "| $t | failed: see $log |"
        tail -5 "$log"
    fi
done
# Where a BF16 step's time goes (RP_PROFILE=1: every op of the one-token forwards timed,
# a synchronize after each: the achieved bandwidth of each matmul)
if [ "${RP_GPU_PROFILE:-1}" = 1 ]; then
    RP_PROFILE=1 timeout 300 "$build/bench/step-bench" "$model" --device cuda --batch 1 --ctx 512 --steps 10 \
        > "$out/profile-bf16.log" 2>&1
    sed -n '/^profile:/,$p' "$out/profile-bf16.log"
fi
