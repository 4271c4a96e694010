#!/usr/bin/env bash
# session 19, call 4: where the tensor-core matmul and attention wait (ncu sections), for the next session
set -uo pipefail
L=/tmp/logs; rm -rf $L; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
fin() { tar czf $OUT/logs.tgz -C /tmp logs; }
trap fin EXIT
tests/gpu/run.sh .device/debs $L/gpu build || exit 1
el build
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
for op in qkv gateup down wo; do
  timeout 90 $NCU --clock-control none $S -k regex:k_matmul_tc --launch-skip 40 --launch-count 1 build-gpu/bench/matmul-op-bench --ops $op --ns 1 --runs 3 > $L/ncu-$op.txt 2>&1
  el "$op rc $?"
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|stalled_(long|barrier|wait|lg|mio|short|no_inst|math|drain|branch)" $L/ncu-$op.txt | head -24
done
