#!/usr/bin/env bash
# GPU evidence for `attnsel verify` (vLLM's own engine per candidate pair), one step per call so
# that each stays under a 10-minute command limit. Needs vLLM 0.24.0 with what `vllm.LLM` imports:
#   bash bench/tools/gpu_session.sh pack engine   (here) ... receive / unpack (there), then
#   eval "$(bash bench/tools/gpu_session.sh env vllm)"
#
#   bash bench/tools/verify_evidence.sh smoke OUT         # one small engine: the worker works here (~1-3 min)
#   bash bench/tools/verify_evidence.sh llama-tune OUT    # Llama-3.1-8B default sweep (~2-4 min)
#   bash bench/tools/verify_evidence.sh llama OUT         # vLLM's default, tune's pick, runner-up (~7 min)
#   bash bench/tools/verify_evidence.sh qwen-tune OUT     # Qwen3-0.6B decode sweep up to 32k context
#   bash bench/tools/verify_evidence.sh qwen OUT          # the same three pairs at 1 x 32768 and 16 x 32768
#   bash bench/tools/verify_evidence.sh hybrid-tune OUT   # Nemotron-H-8B (hybrid: 4 attention + 24 Mamba-2 layers of 52)
#   bash bench/tools/verify_evidence.sh hybrid OUT        # its three pairs; the block size vLLM really uses is read back
#   (granite-tune / granite: Granite-4.0-H-350M, the same for a small hybrid; vLLM 0.24's Granite code reads
#    layer_types "attention"/"mamba", which transformers >= 5 renames: it may fail to start, and its row says so)
#   bash bench/tools/verify_evidence.sh fixtures OUT      # small copies into tests/fixtures/verify/ (then commit them)
# A verify step cut short by the command limit continues where it stopped when run again (--resume).
set -euo pipefail
step=${1:-help}
out=${2:-}
py() { python3 -m attnsel "$@"; }

verify_step() {  # verify_step NAME [verify options...]
  local name=$1; shift
  local resume=(); [ -f "$out/$name/verify.json" ] && resume=(--resume)
  py verify "$out/$name" "${resume[@]}" "$@" > "$out/$name.verify.txt" 2> "$out/$name.verify.err" || true
  tail -40 "$out/$name.verify.txt"; grep -h "error" "$out/$name.verify.err" | tail -5 || true
}

tune_step() {  # tune_step NAME tune options...
  local name=$1; shift
  py tune "$@" --output "$out/$name" > "$out/$name.tune.txt" 2> "$out/$name.tune.err" || true
  grep -h "^time:" "$out/$name/summary.txt" || true
  sed -n '/^Recommendation/,$p' "$out/$name.tune.txt"
}

case "$step" in
  smoke)
    mkdir -p "$out"
    py verify --model qwen3-0.6b --candidates TRITON_ATTN:64 --shapes 1x1024 --decode-steps 32 --output "$out/smoke" \
      > "$out/smoke.txt" 2> "$out/smoke.err" || true
    tail -30 "$out/smoke.txt"; tail -5 "$out/smoke.err"; ls "$out/smoke/verify" ;;
  llama-tune) mkdir -p "$out"; tune_step llama8b --model llama-3.1-8b ;;
  llama) verify_step llama8b ;;
  qwen-tune) mkdir -p "$out"  # FlexAttention left out: it recompiles for every shape of the full grid (~11 s each)
    tune_step qwen06 --model qwen3-0.6b --full --workload decode --block-sizes 16,64,128 --backends FLASH_ATTN,FLASHINFER,TRITON_ATTN ;;
  qwen) verify_step qwen06 --shapes 1x32768,16x32768 ;;
  hybrid-tune) mkdir -p "$out"; tune_step nemotron_h --model nemotron-h-8b --workload decode ;;
  hybrid) verify_step nemotron_h --shapes 1x4096,64x4096 ;;
  granite-tune) mkdir -p "$out"; tune_step granite --model granite-4.0-h-350m --workload decode ;;
  granite) verify_step granite ;;
  fixtures)
    root=$(cd "$(dirname "$0")/../.." && pwd)
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z ' 'a-z_' | sed 's/nvidia_//; s/_80gb.*//')
    for name in llama8b qwen06 nemotron_h granite; do
      [ -f "$out/$name/verify.json" ] && python3 -m attnsel.bench.tools.verify_fixture "$out/$name" "$root/tests/fixtures/verify/${gpu}_${name}"
    done ;;
  *) sed -n '2,17p' "$0" ;;
esac
