#!/usr/bin/env bash
# session 19, call 5: a row group's split partials added by its last warp (no block barrier)
set -uo pipefail
L=/tmp/logs; rm -rf $L; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
fin() { tar czf $OUT/logs.tgz -C /tmp logs; }
trap fin EXIT
(python3 bench/make_bench_model.py /tmp/qwen2.5-7b-random --shape 7b > $L/make_model.log 2>&1; echo done > /tmp/model.done) &
tests/gpu/run.sh .device/debs $L/gpu build || exit 1
el build
for v in "RP_CUDA_TC_FREE=1" "RP_CUDA_TC_FREE=0"; do
  n=$(echo $v | tr ' =' '_-')
  env $v RP_TEST_REQUIRE_DEVICE=1 timeout 100 build-gpu/tests/backend_test_backend_ops > $L/ops-$n.log 2>&1; el "ops $v rc $? $(grep -c '\[       OK \]' $L/ops-$n.log) ok, $(grep -c 'FAILED \]' $L/ops-$n.log) failed"
  grep -B2 -A8 "FAILED\|ERROR\]" $L/ops-$n.log | head -20
  env $v timeout 40 build-gpu/bench/matmul-op-bench --runs 12 --ns 1,8,16 > $L/mob-$n.log 2>&1
  echo "$v: $(grep '^|' $L/mob-$n.log | grep -v '^| op\|---' | awk -F'|' '{printf "%s%s%s;", $2, $4, $5}')"
done
while [ ! -f /tmp/model.done ]; do sleep 2; done
el model
m=/tmp/qwen2.5-7b-random
for v in "RP_CUDA_TC_FREE=1" "RP_CUDA_TC_FREE=0"; do
  n=$(echo $v | tr ' =' '_-')
  env $v timeout 60 build-gpu/bench/step-bench $m --device cuda --batch 1 --ctx 512 --steps 40 > $L/step-$n.log 2>&1
  env $v timeout 60 build-gpu/bench/verify-bench $m --device cuda --ctx 512 --max 16 --reps 15 > $L/verify-$n.log 2>&1
  el "$v: $(grep '^| 1 |' $L/step-$n.log)"; grep "^ *[0-9]" $L/verify-$n.log | awk '$1==1||$1==8||$1==16' | head -4
done
