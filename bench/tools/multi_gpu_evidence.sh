#!/usr/bin/env bash
# issue 12's evidence on a machine with 2+ GPUs: the default sweep (Llama-3.1-8B, vLLM's kernels) on one GPU
# and with `--gpus all`, cold (no FlashInfer / Triton / inductor / vLLM caches) and warm, in one session.
# Needs vLLM 0.24.0 as for gpu_session.sh (pack / receive / unpack, then `eval "$(... env vllm)"`).
#   bash bench/tools/multi_gpu_evidence.sh OUT [--two-only]   (~6 min / ~4 min on 2 x H100/H200); a tarball of OUT after each step
set -uo pipefail
out=${1:?OUT folder}; mkdir -p "$out"
save() { [ -n "${OUT:-}" ] && tar czf "$OUT/multi_gpu.tgz" -C "$(dirname "$out")" "$(basename "$out")"; }
clear_caches() { rm -rf ~/.cache/flashinfer ~/.triton /tmp/torchinductor_root ~/.cache/vllm; }
sweep() {  # sweep NAME LIMIT_S [tune options...]
  local name=$1 limit=$2; shift 2; local start; start=$(date +%s)
  timeout "$limit" python3 -m attnsel tune --model llama-3.1-8b --output "$out/$name" "$@" \
    > "$out/$name.txt" 2> "$out/$name.err"
  echo "$name: exit $? wall $(( $(date +%s) - start )) s"
  grep -h "^time:" "$out/$name/summary.txt" | cut -c1-300
  python3 -c "import json,sys; g=json.load(open(sys.argv[1])).get('gpus'); g and print('gpus:', json.dumps(g)[:700])" \
    "$out/$name/tune.json" 2>/dev/null
  sed -n '/vLLM flags/,+1p' "$out/$name.txt"; save
}
nvidia-smi --query-gpu=index,name,driver_version,memory.used --format=csv,noheader > "$out/gpus.txt"; cat "$out/gpus.txt"
nvidia-smi topo -m > "$out/topo.txt" 2>&1
if [ "${2:-}" = "--two-only" ]; then  # a shorter re-measure: the 2-GPU runs and one warm baseline
  clear_caches; sweep cold_2gpu 180 --gpus all
  sweep warm_1gpu 100
  sweep warm_2gpu 100 --gpus all
else
  clear_caches; sweep cold_1gpu 220
  sweep warm_1gpu 100
  sweep warm_2gpu 100 --gpus all
  clear_caches; sweep cold_2gpu 160 --gpus all
fi
python3 -m attnsel.bench.tools.compare_runs "$out/warm_1gpu" "$out/warm_2gpu" > "$out/compare_warm.txt" 2>&1; tail -4 "$out/compare_warm.txt"
save
