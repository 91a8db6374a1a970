#!/usr/bin/env bash
# Several GPU jobs side by side on one multi-GPU machine, each in a "lane": its own GPU(s)
# (CUDA_VISIBLE_DEVICES), its own CPU cores (taskset) and its own caches (HOME, so FlashInfer's JIT
# cache, ~/.triton and vLLM's compile cache; TORCHINDUCTOR_CACHE_DIR), so that one lane's JIT work
# neither warms another's caches nor takes its cores. One GPU and 16 cores is the shape of the
# one-H100 machines, so a "cold" figure from such a lane is comparable with one measured there.
# What lanes still share: host memory bandwidth, the disk and PCIe; say so next to any timing.
#
#   bash bench/tools/gpu_lanes.sh OUT 'NAME|GPUS|CORES|PKG|COMMAND' ...
#     GPUS: CUDA_VISIBLE_DEVICES (e.g. 0 or 2,3); CORES: a taskset list (e.g. 0-15);
#     PKG: a folder holding an `attnsel` link (the checkout the lane runs); COMMAND: bash, run in this
#     checkout with $LANE_OUT (OUT/NAME) set; its output goes to OUT/NAME.log.
#   bash bench/tools/gpu_lanes.sh --timed NAME CMD...   (inside a lane: CMD's output in $LANE_OUT/NAME.txt,
#     'NAME exit seconds' appended to $LANE_OUT/times.txt)
# Prints one line per lane: name, exit status, seconds. Exit 1 when any lane failed.
set -uo pipefail
if [ "${1:-}" = --timed ]; then  # --timed NAME CMD...: one timed step inside a lane
  name=$2; shift 2; t0=$(date +%s.%N); rc=0
  "$@" > "$LANE_OUT/$name.txt" 2>&1 || rc=$?
  echo "$name $rc $(python3 -c "print(round($(date +%s.%N) - $t0, 1))")" >> "$LANE_OUT/times.txt"; exit "$rc"
fi
out=${1:?OUT folder}; shift
root=$(cd "$(dirname "$0")/../.." && pwd)
site=${LANE_SITE:-/tmp/site}   # the carried vLLM (bench/tools/gpu_session.sh unpack)
mkdir -p "$out"
pids=()
for spec in "$@"; do
  # the first four fields end at a '|'; the command is the rest, '|' and newlines included
  name=${spec%%|*}; rest=${spec#*|}; gpus=${rest%%|*}; rest=${rest#*|}
  cores=${rest%%|*}; rest=${rest#*|}; pkg=${rest%%|*}; command=${rest#*|}
  lane_home=/tmp/lanes/$name; mkdir -p "$lane_home" "$out/$name"
  (
    cd "$root" || exit 2
    export HOME=$lane_home TORCHINDUCTOR_CACHE_DIR=$lane_home/inductor CUDA_VISIBLE_DEVICES=$gpus \
           PYTHONPATH=$pkg:$site LANE_OUT=$out/$name
    t0=$(date +%s.%N); rc=0
    taskset -c "$cores" bash -c "$command" > "$out/$name.log" 2>&1 || rc=$?
    echo "lane $name exit $rc $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" > "$out/$name.status"
    exit "$rc"
  ) &
  pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat "$out"/*.status | tee "$out/lanes.txt"
exit $status
