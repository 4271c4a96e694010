#!/usr/bin/env bash
# session 10: the AMX kernel as committed: tests on the Xeon, AMX (the default) against --f32-activations
set -u
tools/device_bench.sh .gpu-train/debs $OUT none > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/rapid-sys/usr/lib/x86_64-linux-gnu
B=.gpu-train/bin33
chmod +x $B/*
export RP_SOURCE_DIR=$PWD
printf '#!/bin/sh\nexec %s/rapid "$@" --f32-activations\n' "$PWD/$B" > /tmp/rapid-f32; chmod +x /tmp/rapid-f32
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; cat /proc/loadavg; } > $OUT/machine.txt
(python3 bench/make_bench_model.py /tmp/q05 > /dev/null 2>&1) &
{ for t in backend_test_matmul model_test_rapid_tiny model_test_determinism model_test_fingerprint spec_test_verify engine_test_spec engine_test_engine engine_test_prefix; do
  echo "## $t $(date +%T)"; timeout 200 $B/$t > /tmp/t.log 2>&1; echo "rc=$?"; grep -E "AMX|PASSED|FAILED|SKIPPED  \]|rror" /tmp/t.log | head -8; done; } > $OUT/tests.log 2>&1
{ echo "## mmbb 1 thread"; timeout 60 $B/mmbb 1; echo "## mmbb 16 threads big"; timeout 90 $B/mmbb 16 --big; } > $OUT/mmbb.log 2>&1
wait
for rep in 1 2; do for f in "" --f32-activations; do
  for t in 2 16; do echo "${f:-amx} verify t$t $(timeout 30 $B/verify-bench models/rapid-tiny --threads $t --ctx 2500 --max 27 $f | grep -E '^ +(1|8|27) ' | tr -s ' ' | tr '\n' ' ')"; done
  for t in 2 16; do echo "${f:-amx} step tiny t$t $(timeout 30 $B/step-bench models/rapid-tiny --threads $t --ctx 256 --batch 1,4,16 --steps 60 $f | grep '^| [0-9]' | cut -d'|' -f2,4 | tr '\n' ' ')"; done
  echo "${f:-amx} step 0.5B t16 $(timeout 60 $B/step-bench /tmp/q05 --threads 16 --ctx 256 --batch 1,4,16 --steps 20 $f | grep '^| [0-9]' | cut -d'|' -f2,4 | tr '\n' ' ')"
done; done > $OUT/steps.log 2>&1
head -c 2400 tests/data/edit/stage1.py > /tmp/p600.txt
for rep in 1 2; do for r in $B/rapid /tmp/rapid-f32; do
  echo "$r prefill 0.5B t16 $(timeout 60 $r run /tmp/q05 -f /tmp/p600.txt -n 16 --raw --threads 16 --no-spec-decode --ignore-eos 2>&1 | grep -o 'prompt: [^|]*|')"
  echo "$r decode 0.5B t16 $(timeout 60 $r run /tmp/q05 -p hello -n 64 --raw --threads 16 --no-spec-decode --ignore-eos 2>&1 | grep -o 'generated: [^|]*|')"
  echo "$r prefill tiny t2 $(timeout 60 $r run models/rapid-tiny -f tests/data/edit/stage1.py -n 16 --raw --threads 2 --no-spec-decode --ignore-eos 2>&1 | grep -o 'prompt: [^|]*|')"
done; done > $OUT/run.log 2>&1
for f in "2 amx" "2 f32" "16 amx" "16 f32"; do set -- $f; r=$B/rapid; [ $2 = f32 ] && r=/tmp/rapid-f32
  echo "## $2 threads $1 $(date +%T)"; timeout 150 bench/spec_bench.sh --rapid $r --threads $1 --runs 3 2>&1 | grep -E "^\|"; done > $OUT/spec.log 2>&1
cat /proc/loadavg >> $OUT/machine.txt
