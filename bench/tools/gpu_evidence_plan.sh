#!/usr/bin/env bash
# One 4-GPU lease's evidence (H100 or H200) (issues 21, 22, 25), packed into lanes (bench/tools/gpu_lanes.sh): each lane
# one GPU, 16 cores and its own caches, i.e. the shape of a one-H100 machine. Needs the carried vLLM
# (bench/tools/gpu_session.sh receive/unpack) and, for the "before" figures, an older checkout's
# package in .before/ (git archive <commit> | tar -x -C .before --exclude=tests; echo <commit> > .before/COMMIT).
#
#   setsid bash bench/tools/gpu_evidence_plan.sh RESULTS > RESULTS.log 2>&1 &     # ~20 min on 4 H100s
#
# Two halves side by side, each of two GPUs and 32 cores, each step a lane (one GPU, 16 cores); most
# wanted first in each lane, so a lease cut short still leaves the earlier steps (~10 min on 4 GPUs):
#   A (gpu0-1): memory records (fp8 checkpoint, MoE+MLA, CUDA graphs | a refused length, fp8 KV);
#               the TP-2 memory record; then `verify` as typed (caches emptied)
#   B (gpu2-3): `tune` as typed cold, warm, probe x7, then the A/A verify (vLLM's default started twice)
#               | `tune --model deepseek-v2-lite` (MLA) and its verify (default, pick, runner-up)
# PLAN=release: issue 21 on a carried release (dense tune+verify | MLA tune+verify | fp8 KV tune+verify |
# sparse MLA at TP 8/4/2/1, then head size 512 with an fp8 cache: FA4 on SM90 in 0.33), four lanes, ~12 min.
# PLAN=before adds nothing of this; it runs the speed steps with the .before checkout instead (the
# "before" column, same lanes), and PLAN=gpus the `tune --gpus 0,1` / `--gpus all` scaling, cold and warm.
# PLAN=speed: issue 25's whole before/after table in one sitting (below); PLAN=speed2 the same on 2 GPUs;
# PLAN=bytecode: what the carried packages' missing .pyc files cost tune (below).
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
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton, vllm, flashinfer; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'triton', triton.__version__, 'vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"
  echo "after: $(git -C "$root" log -1 --format=%h 2>/dev/null) before: $(cat .before/COMMIT 2>/dev/null)"; } > "$res/machine.txt" 2>&1
# probe_both GPUS CORES: `probe --json` x10 with the before checkout, then the after one, on the idle machine
probe_both() {
  local side pkg
  for side in before after; do
    pkg=$before; [ "$side" = after ] && pkg=$after
    $lanes "$res/probe" "probe_$side|$1|$2|$pkg|python3 -m attnsel.bench.tools.probe_speed --runs 10 > \$LANE_OUT/probe.json"
  done
}
case "${PLAN:-evidence}" in
  evidence)
    half_a="$lanes $res/A1 'memory0|0|0-15|$after|$mem qwen3_8b_fp8_checkpoint,deepseek_v2_lite_mla_moe,qwen06_graphs' 'memory1|1|16-31|$after|$mem llama8b_u030_len131072,llama8b_fp8_kv';
     $lanes $res/A2 'tp2|0,1|0-31|$after|$mem llama8b_tp2';
     $lanes $res/A3 'after_verify|0|0-15|$after|SPEED_STEPS=verify $speed'"
    half_b="$lanes $res/B1 'after_tune|2|32-47|$after|SPEED_STEPS=tune $speed; $timed aa timeout 420 $aa' 'mla|3|48-63|$after|$timed mla_tune timeout 240 python3 -m attnsel tune --model deepseek-v2-lite --workload decode --output \$LANE_OUT/mla_tune; $timed mla_verify timeout 560 python3 -m attnsel verify \$LANE_OUT/mla_tune --output \$LANE_OUT/mla_verify'"
    $lanes "$res/halves" "A|0,1|0-31|$after|$half_a" "B|2,3|32-63|$after|$half_b" ;;
  before)
    $lanes "$res/before" "before_tune|0|0-15|$before|SPEED_STEPS=tune $speed" \
      "before_verify|1|16-31|$before|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2.4 $speed" ;;
  gpus)
    $lanes "$res/gpus2" "gpus2|0,1|0-31|$after|$empty; $timed cold $tune --gpus 0,1 --output \$LANE_OUT/cold; $timed warm $tune --gpus 0,1 --output \$LANE_OUT/warm"
    $lanes "$res/gpus4" "gpus4|0,1,2,3|0-63|$after|$empty; $timed cold $tune --gpus all --output \$LANE_OUT/cold; $timed warm $tune --gpus all --output \$LANE_OUT/warm" ;;
  speed)
    # issue 25's before/after in one sitting (.before = the checkout before the speed work). Phase 1, four
    # lanes of one GPU and 16 cores (a one-H100 machine's shape), side by side so both columns share
    # the machine's state: tune cold+warm before | after, verify (caches emptied) after | the A/A
    # verify (vLLM's default started twice). The before verify is left out: the 2 x H200 sitting
    # recorded it past its 598 s limit. Phase 2, `--gpus` scaling with the after checkout, each run
    # given the cores a machine with that many GPUs has: 1 GPU / 16 cores beside 2 GPUs / 32 cores and,
    # on the fourth GPU, the 1-GPU run with CUPTI set up for every row as before (ATTNSEL_CUPTI_FINALIZE=1)
    # then bench/tools/cupti_ab.py; then 4 GPUs / 64 cores. Then `probe --json` x10 before and after
    # on the quiet machine, with the bytecode a pip install writes. ~17 min on 4 H100s.
    $lanes "$res/phase1" "before_tune|0|0-15|$before|SPEED_STEPS=tune SPEED_LIMIT_SCALE=1.6 $speed" \
      "after_tune|1|16-31|$after|SPEED_STEPS=tune SPEED_LIMIT_SCALE=1.6 $speed" \
      "after_verify|2|32-47|$after|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2.6 $speed" \
      "after_aa|3|48-63|$after|$empty; $timed aa timeout 500 $aa"
    scale="$empty; $timed cold timeout 300 $tune \${GPUS:+--gpus \$GPUS} --output \$LANE_OUT/cold; $timed warm timeout 150 $tune \${GPUS:+--gpus \$GPUS} --output \$LANE_OUT/warm"
    $lanes "$res/phase2" "gpus1|0|0-15|$after|GPUS=; $scale" "gpus2|1,2|16-47|$after|GPUS=all; $scale" \
      "cupti_finalize|3|48-63|$after|export ATTNSEL_CUPTI_FINALIZE=1; GPUS=; $scale; unset ATTNSEL_CUPTI_FINALIZE; $timed cupti_ab timeout 120 python3 -m attnsel.bench.tools.cupti_ab --rows 30 --output \$LANE_OUT/cupti_ab.json"
    $lanes "$res/phase3" "gpus4|0,1,2,3|0-63|$after|GPUS=all; $scale"
    python3 -m compileall -q -j 0 "$root" "$root/.before" > /dev/null 2>&1
    probe_both 0,1,2,3 0-63 ;;
  speed2)
    # PLAN=speed on a 2-GPU machine (32 cores): tune before | after, then verify before | after (+ the
    # A/A verify), then `--gpus all` on both GPUs with all 32 cores (the 1-GPU figure: after_tune's
    # lane, 16 cores, a one-GPU machine's share), then probe x10 before and after. ~20 min on 2 H100s.
    $lanes "$res/phase1" "before_tune|0|0-15|$before|SPEED_STEPS=tune SPEED_LIMIT_SCALE=1.6 $speed" \
      "after_tune|1|16-31|$after|SPEED_STEPS=tune SPEED_LIMIT_SCALE=1.6 $speed"
    $lanes "$res/phase1" "before_verify|0|0-15|$before|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2.6 $speed" \
      "after_verify|1|16-31|$after|SPEED_STEPS=verify SPEED_LIMIT_SCALE=2 $speed; $timed aa timeout 360 $aa"
    scale="$empty; $timed cold timeout 300 $tune --gpus all --output \$LANE_OUT/cold; $timed warm timeout 150 $tune --gpus all --output \$LANE_OUT/warm"
    $lanes "$res/phase2" "gpus2|0,1|0-31|$after|$scale"
    probe_both 0,1 0-31 ;;
  bytecode)
    # what the carried packages' missing .pyc cost (the device sets PYTHONDONTWRITEBYTECODE; a pip install
    # writes them): after `KEEP=/tmp/site-nopyc gpu_session.sh bytecode`, tune cold+warm with the compiled
    # site | the same with the copy without bytecode, side by side; then `--gpus all` warm on the compiled
    # lane's caches; then probe x10 with NVML's calls in threads | serial (ATTNSEL_PROBE_THREADS=1) and
    # nvml_call_times. ~6 min on 4 GPUs.
    one="$empty; $timed cold timeout 300 $tune --output \$LANE_OUT/cold; $timed warm timeout 150 $tune --output \$LANE_OUT/warm"
    $lanes "$res/phase1" "pyc|0|0-15|$after|$one" "nopyc|1|16-31|$after|export PYTHONPATH=$after:/tmp/site-nopyc; $one"
    $lanes "$res/phase2" "pyc|0,1,2,3|0-63|$after|$timed warm timeout 150 $tune --gpus all --output \$LANE_OUT/warm"
    $lanes "$res/probe" "probe|0,1,2,3|0-63|$after|python3 -m attnsel.bench.tools.probe_speed --runs 10 > \$LANE_OUT/threads.json; ATTNSEL_PROBE_THREADS=1 python3 -m attnsel.bench.tools.probe_speed --runs 10 > \$LANE_OUT/serial.json; python3 -m attnsel.bench.tools.nvml_call_times --runs 3 --output \$LANE_OUT/nvml_times.json" ;;
  release)
    # issue 21 items 3-4 with a carried release (VLLM_RELEASE=0.33.0 bash bench/tools/gpu_session.sh pack):
    # one lane a job, every lane's caches empty (its own HOME), so each tune is a first run
    # the first sparse TP compiles FlashInfer's FA3 MLA module for FLASHINFER_MLA_SPARSE_SM90 (minutes);
    # then GLM-5-Next at TP 8 (NoPE, head 512: where vLLM 0.30+ picks that backend, vllm#56564)
    sparse='for tp in 8 4 2 1; do '"$timed"' sparse_tp$tp timeout 600 python3 -m attnsel tune --model deepseek-v3.2 -tp $tp --workload decode --block-sizes 64 --timeout 360 --output $LANE_OUT/sparse_tp$tp; done; '"$timed"' glm5_tp8 timeout 600 python3 -m attnsel tune --model glm-5-next -tp 8 --workload decode --timeout 360 --output $LANE_OUT/glm5_tp8'
    verify='python3 -m attnsel verify'
    $lanes "$res/release" \
      "dense|0|0-15|$after|$timed dense_tune timeout 330 $tune --output \$LANE_OUT/dense_tune; $timed dense_verify timeout 560 $verify \$LANE_OUT/dense_tune --model llama-3.1-8b --output \$LANE_OUT/dense_verify" \
      "mla|1|16-31|$after|$timed mla_tune timeout 300 python3 -m attnsel tune --model deepseek-v2-lite --workload decode --output \$LANE_OUT/mla_tune; $timed mla_verify timeout 600 $verify \$LANE_OUT/mla_tune --output \$LANE_OUT/mla_verify" \
      "fp8|2|32-47|$after|$timed fp8_tune timeout 330 python3 -m attnsel tune --model llama-3.1-8b --kv-cache-dtype fp8 --output \$LANE_OUT/fp8_tune; $timed fp8_verify timeout 500 $verify \$LANE_OUT/fp8_tune --output \$LANE_OUT/fp8_verify" \
      "sparse|3|48-63|$after|$sparse; $timed head512_fp8 timeout 240 python3 -m attnsel tune --head-size 512 --dtype bf16 --kv-cache-dtype fp8 --workload decode --output \$LANE_OUT/head512_fp8" ;;
esac
echo "plan finished $(date -u +%H:%M:%S)" > "$res/DONE"
