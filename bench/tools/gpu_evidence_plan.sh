#!/usr/bin/env bash
# One 4-GPU lease's evidence (H100 or H200) (issues 21, 22, 25), packed into lanes (bench/tools/gpu_lanes.sh): each lane
# one GPU, 16 cores and its own caches, i.e. the shape of a one-H100 machine. Needs the carried vLLM
# (bench/tools/gpu_session.sh receive/unpack) and, for the "before" figures, an older checkout's
# package in .before/ (git archive <commit> | tar -x -C .before --exclude=tests).
#
#   setsid bash bench/tools/gpu_evidence_plan.sh RESULTS > RESULTS.log 2>&1 &     # ~20 min on 4 H100s
#
# Two halves side by side, each of two GPUs and 32 cores, each step a lane (one GPU, 16 cores):
#   A (gpu0-1): `tune` as typed cold, warm and probe x7, this checkout | the .before checkout;
#               `tune --gpus 0,1` cold and warm (32 cores); memory records and the A/A verify | memory
#               records and the sparse-MLA tunes at TP 4, 2, 1; the TP-2 memory record
#   B (gpu2-3): `verify` as typed, caches emptied, this checkout, then `tune --model deepseek-v2-lite`
#               (MLA) and its verify | the same verify with .before, then the sparse-MLA tune at TP 8
#               and its engine verify (the TP-8 shard)
# Then `tune --gpus all` cold and warm on 64 cores (16 per GPU, as the 1-GPU and 2-GPU figures had).
# Most wanted first in each lane: what is cut short by the lease still leaves the earlier steps.
set -uo pipefail
res=${1:?RESULTS folder}; mkdir -p "$res"
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root" || exit 2
after=/tmp/attnsel-pkg; before=/tmp/before-pkg
mkdir -p "$after" "$before"; ln -sfn "$root" "$after/attnsel"; ln -sfn "$root/.before" "$before/attnsel"
lanes='bash bench/tools/gpu_lanes.sh'
speed='bash bench/tools/gpu_session.sh speed $LANE_OUT/speed'
mem='python3 -m attnsel.bench.tools.memory_record --out $LANE_OUT/memory --cases full --only'
empty='rm -rf ~/.cache/flashinfer ~/.triton ~/.cache/vllm "$TORCHINDUCTOR_CACHE_DIR"'
tune='python3 -m attnsel tune --head-size 128 --dtype bf16'
# timed NAME CMD...: CMD's output in $LANE_OUT/NAME.txt, "NAME exit seconds" appended to $LANE_OUT/times.txt
timed='bash bench/tools/gpu_lanes.sh --timed'
aa='python3 -m attnsel verify --model llama-3.1-8b --candidates default --repeat-engine 2 --shapes 1x32768,4x16384,64x4096 --output $LANE_OUT/aa'
sparse='bash bench/tools/gpu_session.sh sparse $LANE_OUT/sparse'
on_after="PYTHONPATH=$after:/tmp/site"
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"
  echo "after: $(cat .after/COMMIT 2>/dev/null || git -C "$root" log -1 --format=%h 2>/dev/null) before: $(cat .before/COMMIT 2>/dev/null)"; } > "$res/machine.txt" 2>&1
half_a="$lanes $res/A1 'after_tune|0|0-15|$after|SPEED_STEPS=tune $speed' 'before_tune|1|16-31|$before|SPEED_STEPS=tune $speed';
 $lanes $res/A2 'gpus2|0,1|0-31|$after|$empty; $timed cold $tune --gpus 0,1 --output \$LANE_OUT/cold; $timed warm $tune --gpus 0,1 --output \$LANE_OUT/warm';
 $lanes $res/A3 'memory0|0|0-15|$after|$mem qwen06_graphs,llama8b_fp8_kv; $timed aa timeout 420 $aa' 'memory1|1|16-31|$after|$mem qwen3_8b_fp8_checkpoint,deepseek_v2_lite_mla_moe; SPARSE_TPS=\"4 2 1\" $sparse';
 $lanes $res/A4 'tp2|0,1|0-31|$after|$mem llama8b_tp2'"
half_b="$lanes $res/B1 'after_verify|2|32-47|$after|SPEED_STEPS=verify $speed; $timed mla_tune timeout 240 python3 -m attnsel tune --model deepseek-v2-lite --workload decode --output \$LANE_OUT/mla_tune; $timed mla_verify timeout 560 python3 -m attnsel verify \$LANE_OUT/mla_tune --output \$LANE_OUT/mla_verify' 'before_verify|3|48-63|$before|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2.4 $speed; $on_after SPARSE_TPS=8 $sparse; $on_after bash bench/tools/gpu_session.sh sparse-verify \$LANE_OUT/sparse'"
$lanes "$res/halves" "A|0,1|0-31|$after|$half_a" "B|2,3|32-63|$after|$half_b"
$lanes "$res/C" "gpus4|0,1,2,3|0-63|$after|$empty; $timed cold $tune --gpus all --output \$LANE_OUT/cold; $timed warm $tune --gpus all --output \$LANE_OUT/warm"
echo "plan finished $(date -u +%H:%M:%S)" > "$res/DONE"
