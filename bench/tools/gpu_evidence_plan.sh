#!/usr/bin/env bash
# One 4-GPU lease's evidence (H100 or H200) (issues 21, 22, 25), packed into lanes (bench/tools/gpu_lanes.sh): each lane
# one GPU, 16 cores and its own caches, i.e. the shape of a one-H100 machine. Needs the carried vLLM
# (bench/tools/gpu_session.sh receive/unpack) and, for the "before" figures, an older checkout's
# package in .before/ (git archive <commit> | tar -x -C .before --exclude=tests).
#
#   setsid bash bench/tools/gpu_evidence_plan.sh RESULTS > RESULTS.log 2>&1 &     # ~20 min on 4 H100s
#
# Phase 1, four lanes side by side:
#   gpu0: `tune` as typed, cold then warm, and probe x7 (this checkout), then two memory records
#   gpu1: the same with the .before checkout, then two memory records, then the sparse-MLA tunes
#   gpu2: `verify` as typed, caches emptied (this checkout), then `tune --model deepseek-v2-lite` (MLA) and its verify
#   gpu3: `verify` as typed, caches emptied (.before), then the A/A verify (default started twice)
# Phase 2: `tune --gpus 0,1` cold and warm on 32 cores beside the TP-2 memory record on gpu2-3;
#          then `tune --gpus all` cold and warm on 64 cores (16 per GPU, as the 1-GPU figure had).
set -uo pipefail
res=${1:?RESULTS folder}; mkdir -p "$res"
root=$(cd "$(dirname "$0")/../.." && pwd); cd "$root" || exit 2
after=/tmp/attnsel-pkg; before=/tmp/before-pkg
mkdir -p "$after" "$before"; ln -sfn "$root" "$after/attnsel"; ln -sfn "$root/.before" "$before/attnsel"
speed='bash bench/tools/gpu_session.sh speed $LANE_OUT/speed'
mem='python3 -m attnsel.bench.tools.memory_record --out $LANE_OUT/memory --cases full --only'
empty='rm -rf ~/.cache/flashinfer ~/.triton ~/.cache/vllm "$TORCHINDUCTOR_CACHE_DIR"'
tune='python3 -m attnsel tune --head-size 128 --dtype bf16'
# timed NAME CMD...: CMD's output in $LANE_OUT/NAME.txt, "NAME exit seconds" appended to $LANE_OUT/times.txt
timed='bash bench/tools/gpu_lanes.sh --timed'
aa=${AA_CMD:-'python3 -m attnsel verify --model llama-3.1-8b --candidates default --repeat-engine 2 --shapes 1x32768,4x16384,64x4096 --output $LANE_OUT/aa'}
sparse=${SPARSE_CMD:-'true'}
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"
  echo "after: $(git -C "$root" log -1 --format=%h 2>/dev/null || echo tree) before: $(cat .before/COMMIT 2>/dev/null)"; } > "$res/machine.txt" 2>&1
bash bench/tools/gpu_lanes.sh "$res/phase1" \
  "gpu0|0|0-15|$after|SPEED_STEPS=tune $speed; $mem qwen06_graphs,llama8b_fp8_kv" \
  "gpu1|1|16-31|$before|SPEED_STEPS=tune $speed; PYTHONPATH=$after:/tmp/site $mem qwen3_8b_fp8_checkpoint,deepseek_v2_lite_mla_moe; PYTHONPATH=$after:/tmp/site $sparse" \
  "gpu2|2|32-47|$after|SPEED_STEPS=verify $speed; $timed mla_tune timeout 240 python3 -m attnsel tune --model deepseek-v2-lite --workload decode --output \$LANE_OUT/mla_tune; $timed mla_verify timeout 560 python3 -m attnsel verify \$LANE_OUT/mla_tune --output \$LANE_OUT/mla_verify" \
  "gpu3|3|48-63|$before|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2.4 $speed; PYTHONPATH=$after:/tmp/site timeout 400 $aa > \$LANE_OUT/aa.txt 2>&1"
bash bench/tools/gpu_lanes.sh "$res/phase2a" \
  "gpus2|0,1|0-31|$after|$empty; $timed cold $tune --gpus 0,1 --output \$LANE_OUT/cold; $timed warm $tune --gpus 0,1 --output \$LANE_OUT/warm" \
  "tp2|2,3|32-63|$after|$mem llama8b_tp2"
bash bench/tools/gpu_lanes.sh "$res/phase2b" \
  "gpus4|0,1,2,3|0-63|$after|$empty; $timed cold $tune --gpus all --output \$LANE_OUT/cold; $timed warm $tune --gpus all --output \$LANE_OUT/warm"
echo "plan finished $(date -u +%H:%M:%S)" > "$res/DONE"
