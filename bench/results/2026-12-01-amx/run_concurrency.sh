#!/usr/bin/env bash
# session 10: #7's concurrency scenario through the server on the Xeon, AMX (default) against float32, no speculation
set -u
tools/device_bench.sh .gpu-train/debs $OUT none > /dev/null 2>&1
export LD_LIBRARY_PATH=/tmp/rapid-sys/usr/lib/x86_64-linux-gnu
mkdir -p build && cp .gpu-train/bin37/rapid build/rapid && chmod +x build/rapid
python3 bench/make_bench_model.py /tmp/q05 > /dev/null 2>&1
for m in tiny q05; do M=""; [ $m = q05 ] && M="--model /tmp/q05"
  for v in amx f32; do F="--no-spec-decode"; [ $v = f32 ] && F="--no-spec-decode --f32-activations"
    timeout 110 bench/concurrency.sh --runs 1 --out $OUT/c-$m-$v --scenario concurrency $M "$v=$F" > /dev/null 2>&1
    echo "$m $v: $(grep -o 'concurrency-n[0-9]*: aggregate decode [0-9.]* tok/s ([0-9.]*x one stream)' $OUT/c-$m-$v/$v.log | tr '\n' ' ')"
    rm -rf $OUT/c-$m-$v
  done
done > $OUT/conc.log 2>&1
