#!/usr/bin/env bash
# session 19, call 3: q/k/v's splits chosen together and the grid streaming item after item
# (both now the defaults): the GPU tests, then the step against the previous defaults
set -uo pipefail
L=/tmp/logs; rm -rf $L; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
fin() { tar czf $OUT/logs.tgz -C /tmp logs; }
trap fin EXIT
[ -f /tmp/qwen2.5-7b-random/model.safetensors ] && echo done > /tmp/model.done || { rm -f /tmp/model.done; (python3 bench/make_bench_model.py /tmp/qwen2.5-7b-random --shape 7b > $L/make_model.log 2>&1; echo done > /tmp/model.done) & }
tests/gpu/run.sh .device/debs $L/gpu build,ops || exit 1
el "build, ops"
build-gpu/bench/gpu-bw-bench --gib 8 --runs 10 | tail -1
timeout 60 build-gpu/bench/matmul-op-bench --runs 12 --ns 1,2,4,8,16 > $L/mob.log 2>&1
echo "mob: $(grep '^|' $L/mob.log | grep -v '^| op\|---' | awk -F'|' '{printf "%s%s%s;", $2, $4, $5}')"
while [ ! -f /tmp/model.done ]; do sleep 2; done
el model
m=/tmp/qwen2.5-7b-random
for v in "RP_CUDA_TC_GRID=-1" "RP_CUDA_TC_GRID=0" "RP_CUDA_TC_GRID=0 RP_CUDA_GROUP=0"; do
  n=$(echo $v | tr ' =' '_-')
  env $v timeout 100 build-gpu/bench/step-bench $m --device cuda --batch 1 --ctx 512 --steps 40 > $L/step-$n.log 2>&1
  env $v timeout 120 build-gpu/bench/verify-bench $m --device cuda --ctx 512 --max 16 --reps 15 > $L/verify-$n.log 2>&1
  el "$v: $(grep '^| 1 |' $L/step-$n.log)"; grep "^ *[0-9]" $L/verify-$n.log | awk '$1==1||$1==2||$1==4||$1==8||$1==16' | head -8
done
tests/gpu/run.sh .device/debs $L/gpu unit,http
el "unit, http"
cat $L/gpu/summary.txt
