#!/usr/bin/env bash
# session 19, call 2: the weights through shared memory (RP_CUDA_TC_TMA=1) against registers
set -uo pipefail
L=/tmp/logs; rm -rf $L; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
fin() { tar czf $OUT/logs.tgz -C /tmp logs; }
trap fin EXIT
[ -f /tmp/qwen2.5-7b-random/model.safetensors ] && echo done > /tmp/model.done || { rm -f /tmp/model.done; (python3 bench/make_bench_model.py /tmp/qwen2.5-7b-random --shape 7b > $L/make_model.log 2>&1; echo done > /tmp/model.done) & }
tests/gpu/run.sh .device/debs $L/gpu build || exit 1
el build
for v in "RP_CUDA_TC_TMA=0" "RP_CUDA_TC_TMA=1" "RP_CUDA_TC_TMA=1 RP_CUDA_TC_GRID=-1"; do
  n=$(echo $v | tr ' =' '_-')
  env $v RP_TEST_REQUIRE_DEVICE=1 timeout 120 build-gpu/tests/backend_test_backend_ops > $L/ops-$n.log 2>&1; el "ops $v rc $? $(grep -c '\[       OK \]' $L/ops-$n.log) ok, $(grep -c 'FAILED \]' $L/ops-$n.log) failed"
  grep -B2 -A8 "FAILED\|ERROR\]" $L/ops-$n.log | head -20
done
build-gpu/bench/gpu-bw-bench --gib 8 --runs 10 | tail -1
for v in "RP_CUDA_TC_TMA=0" "RP_CUDA_TC_TMA=1" "RP_CUDA_TC_TMA=1 RP_CUDA_TC_GRID=-1" "RP_CUDA_TC_TMA=1 RP_CUDA_SPLITS=4" "RP_CUDA_TC_TMA=1 RP_CUDA_SPLITS=2"; do
  n=$(echo $v | tr ' =' '_-')
  env $v timeout 60 build-gpu/bench/matmul-op-bench --runs 12 --ns 1,8,16 > $L/mob-$n.log 2>&1
  echo "$v: $(grep '^|' $L/mob-$n.log | grep -v '^| op\|---' | awk -F'|' '{printf "%s%s%s;", $2, $4, $5}')"
done
el sweep
while [ ! -f /tmp/model.done ]; do sleep 2; done
el model
m=/tmp/qwen2.5-7b-random
for v in "RP_CUDA_TC_TMA=0" "RP_CUDA_TC_TMA=1" "RP_CUDA_TC_TMA=1 RP_CUDA_TC_GRID=-1"; do
  n=$(echo $v | tr ' =' '_-')
  env $v timeout 100 build-gpu/bench/step-bench $m --device cuda --batch 1 --ctx 512 --steps 40 > $L/step-$n.log 2>&1
  env $v timeout 120 build-gpu/bench/verify-bench $m --device cuda --ctx 512 --max 16 --reps 15 > $L/verify-$n.log 2>&1
  el "$v: $(grep '^| 1 |' $L/step-$n.log)"; grep "^ *[0-9]" $L/verify-$n.log | awk '$1==1||$1==2||$1==4||$1==8||$1==16' | head -8
done
left=$(( 540 - ($(date +%s) - t0) ))
el "memcheck, $left s left"
[ $left -gt 40 ] && RP_CUDA_TC_TMA=1 RP_TEST_REQUIRE_DEVICE=1 timeout $left /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/backend_test_backend_ops > $L/memcheck-tma.log 2>&1; el "memcheck rc $? $(tail -1 $L/memcheck-tma.log)"
