#!/usr/bin/env bash
# attnsel's GPU evidence with vLLM's own kernels, on any machine with an NVIDIA GPU.
#
# A machine with network access needs only:
#     pip install vllm==0.24.0 'openai<3' cupti-python      # vLLM's pins: torch 2.11, flashinfer 0.6.12
#     bash bench/tools/gpu_session.sh sweeps OUT && bash bench/tools/gpu_session.sh checks OUT
#     bash bench/tools/gpu_session.sh mla OUT && bash bench/tools/gpu_session.sh fp8 OUT   # MLA and fp8 KV
#     bash bench/tools/gpu_session.sh speed OUT      # issue 25's speed table (< 9 min, needs the "engine" set)
#     VLLM_RELEASE=0.26.0 ... sparse OUT             # issue 21: DeepSeek-V3.2's sparse MLA at TP 1/2/4/8 (vLLM >= 0.25)
#     ... sparse-verify OUT                           # then the TP-8 shard in vLLM's engine (optional, "engine" set)
#
# An offline GPU machine (the ones our device tool lends) gets the same Python packages as files:
#   here, with PyPI:  bash bench/tools/gpu_session.sh pack [kernels|engine]
#                     -> .whl/p1 .. .whl/pN, each under 59 MiB (one device call each, with the tree)
#   there, per part:  bash bench/tools/gpu_session.sh receive      (copies .whl/p*/ into /tmp/carry)
#   after the last:   bash bench/tools/gpu_session.sh unpack       (/tmp/site, /tmp/site-standin)
#   as pip would:     bash bench/tools/gpu_session.sh bytecode     (.pyc for /tmp/site and the checkout)
#   then:             eval "$(bash bench/tools/gpu_session.sh env vllm)"; bash bench/tools/gpu_session.sh sweeps OUT
#
# Sets (VLLM_RELEASE=0.24.0 by default, or 0.26.0): "vllm" = the release alone; "kernels" = vLLM 0.24.0 (its FA2 and MoE extensions left out: Hopper runs FA3, no MoE is
# timed), flashinfer 0.6.12 (vLLM's pin; flashinfer-cubin left out, so FlashInfer JIT-compiles),
# the pure-Python modules `import vllm` needs, cupti-python; plus the stand-ins tune uses without
# vLLM (flashinfer 0.7.2, FlashAttention 4) in a second folder. "engine" = what `vllm.LLM` needs
# on top (MoE extension, fastapi, xgrammar, opentelemetry, ...): tune --verify.
# (The wheel lists are ../shared/device/carry.sh's, checked on H100/H200 machines.)
set -euo pipefail
cmd=${1:-help}
root=$(cd "$(dirname "$0")/../.." && pwd)
# a device call carries 64 MiB with the tree (tracked files): a part is what the tree leaves, less 2 MiB
tree_mib() { git -C "$root" ls-files -z | (cd "$root" && xargs -0 du -cb 2>/dev/null) | tail -1 | awk '{print int($1 / 1048576 + 1)}'; }
PART_MIB=${PART_MIB:-$(( 62 - $(tree_mib) ))}

# The release whose wheels are packed: its own pins (`python -m attnsel.bench.tools.release_env pins X`
# reads them from the wheel). Releases after 0.26 pin another torch than the device's 2.11: not packed here.
case "${VLLM_RELEASE:-0.24.0}" in
  0.24.0) VLLM_PINS="vllm==0.24.0 flashinfer-python==0.6.12 apache-tvm-ffi==0.1.9" ;;
  0.26.0) VLLM_PINS="vllm==0.26.0 flashinfer-python==0.6.14 apache-tvm-ffi==0.1.10" ;;
  *) # a release that pins another torch brings its own torch, triton and NCCL: a list of its own
    VLLM_LIST=$root/bench/tools/carry/vllm-${VLLM_RELEASE}.txt
    [ -f "$VLLM_LIST" ] || { echo "no wheel set for vLLM ${VLLM_RELEASE} here (0.24.0, 0.26.0, or a list in bench/tools/carry/)" >&2; exit 2; } ;;
esac
VLLM_SET="${VLLM_PINS:-} pydantic==2.12.5 pydantic-core==2.41.5
 annotated-types typing-inspection msgspec cachetools cbor2 pybase64 blake3 setproctitle pyzmq gguf diskcache==5.6.3
 partial-json-parser ijson python-json-logger watchfiles depyf==0.20.0 lark==1.2.2 compressed-tensors==0.17.0
 jsonschema jsonschema-specifications referencing rpds-py openai-harmony openai<3 httpx httpcore h11 anyio sniffio
 distro jiter"
CUPTI_SET="cupti-python==13.4.0 nvidia-cuda-cupti==13.4.92 pyelftools"
STANDIN_SET="flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.15.post2 flash-attn-4==4.0.0b36 quack-kernels==0.6.5
 torch-c-dlpack-ext==0.1.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1"
ENGINE_SET="loguru cuda-tile dill email-validator dnspython fastapi==0.136.3 starlette==1.10.0 python-multipart
 pydantic-extra-types fastsafetensors==0.5.0 llguidance==1.7.6 xgrammar==0.2.3 googleapis-common-protos
 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp==1.45.2
 opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2
 opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-exporter-http-transport
 opentelemetry-semantic-conventions==0.66b2 opentelemetry-semantic-conventions-ai"

platforms() { for n in 17 18 24 25 27 28 31 34 35; do echo "--platform manylinux_2_${n}_x86_64"; done
              echo "--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any"; }

# site DIR SPEC...: the wheels of SPEC installed (CPython 3.12, x86-64) into DIR, as pip --target would there
site() {
  local dir=$1; shift
  local dl; dl=$(mktemp -d)
  # shellcheck disable=SC2046
  PIP_FIND_LINKS= python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --abi abi3 --abi none $(platforms) -d "$dl" "$@"
  # shellcheck disable=SC2046
  PIP_FIND_LINKS= python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
    --implementation cp $(platforms) --target "$dir" "$dl"/*.whl
  rm -rf "$dl"
}

# strip_vllm DIR: what no Hopper run here loads from vLLM's wheel (FA2: Hopper runs FA3; the Rust
# front end; Blackwell-only headers; deep_gemm builds for other Pythons)
strip_vllm() {
  rm -rf "$1/vllm/vllm-rs" "$1/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$1/vllm/third_party/fmha_sm100" \
    "$1/vllm/third_party/deep_gemm/_C.cpython-31"[0134]-*.so
}

# strip_flashinfer_sources DIR: FlashInfer sources for kernels vLLM does not JIT for these runs
strip_flashinfer_sources() {
  rm -rf "$1/flashinfer/data/csrc/"{cake_dsv4,cake_sampling,kda,fused_moe,gdn,cake_fmha,experimental,blackwell_bf16_fp4}
}

# strip_site DIR: a release set with its own torch (pack_list): both of the above, Triton's profiler
# CUPTI and Blackwell ptxas, console scripts, bytecode caches
strip_site() {
  local d=$1
  strip_vllm "$d"; strip_flashinfer_sources "$d"
  rm -rf "$d/triton/backends/nvidia/lib/cupti-blackwell" "$d/triton/backends/nvidia/lib/cupti" \
    "$d/triton/backends/nvidia/bin/ptxas-blackwell" "$d/bin"
  find "$d" -name __pycache__ -prune -exec rm -rf {} +
}

# pack_list: a release with its own torch (VLLM_LIST), one zstd member per large package so that the
# machine unpacks them side by side. zstd, not xz: 3.1 GB of xz -6 takes ~20 min on a 2-core machine,
# zstd -9 two, for 7% more bytes; the machine reads it with the zstandard wheel carried beside it.
pack_list() {
  local work; work=$(mktemp -d); mkdir -p "$work/out"
  site "$work/site" -r "$VLLM_LIST"
  strip_site "$work/site"
  local big="torch triton vllm nvidia flashinfer" g
  for g in $big; do tar cf - -C "$work/site" "$g" | zstd -q -T0 -9 --long=27 > "$work/out/site-$g.tar.zst"; done
  # shellcheck disable=SC2086
  (cd "$work/site" && ls | grep -vxF "$(printf '%s\n' $big)" | tar cf - -T -) | zstd -q -T0 -9 --long=27 > "$work/out/site-rest.tar.zst"
  # shellcheck disable=SC2046
  PIP_FIND_LINKS= python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $(platforms) -d "$work/out" zstandard==0.25.0
  split_parts "$work/out"; rm -rf "$work"
}

# split_parts DIR: DIR's files as one tar stream in .whl/p1 .. .whl/pN, PART_MIB each
split_parts() {
  cd "$root"
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  rm -rf .whl && mkdir -p .whl
  tar cf - -C "$1" . | split -b "${PART_MIB}M" -a 2 - .whl/bundle.part.
  local n=0; for f in .whl/bundle.part.*; do n=$((n + 1)); mkdir -p ".whl/p$n"; mv "$f" ".whl/p$n/"; done
  du -sh .whl/p*; echo "$n parts"
}

pack() {
  [ -n "${VLLM_LIST:-}" ] && { pack_list; return; }
  local set=${1:-kernels} work; work=$(mktemp -d)
  # shellcheck disable=SC2086
  site "$work/site-vllm" $VLLM_SET $CUPTI_SET
  strip_vllm "$work/site-vllm"
  local drop=()
  if [ "$set" = vllm ]; then
    drop+=(--exclude=./vllm/_moe_C_stable_libtorch.abi3.so)   # vLLM's own kernels only: no stand-ins, no engine
  elif [ "$set" = kernels ]; then
    drop+=(--exclude=./vllm/_moe_C_stable_libtorch.abi3.so)
    # shellcheck disable=SC2086
    site "$work/site-standin" $STANDIN_SET
    strip_flashinfer_sources "$work/site-standin"
  else
    # shellcheck disable=SC2086
    site "$work/site-engine" $ENGINE_SET   # unpacked into the same /tmp/site
  fi
  mkdir -p "$work/out"
  tar cf - -C "$work/site-vllm" "${drop[@]}" . | xz -T0 -9 > "$work/out/site-vllm.tar.xz"
  [ -d "$work/site-standin" ] && tar cf - -C "$work/site-standin" . | xz -T0 -9 > "$work/out/site-standin.tar.xz"
  [ -d "$work/site-engine" ] && tar cf - -C "$work/site-engine" . | xz -T0 -9 > "$work/out/site-engine.tar.xz"
  split_parts "$work/out"; rm -rf "$work"
}

case "$cmd" in
  pack) pack "${2:-kernels}" ;;
  receive)  # a part, and any loose wheels carried in .whl/extra (a package a set lacked, unpacked as they are)
    mkdir -p /tmp/carry && cp "$root"/.whl/p*/bundle.part.* /tmp/carry/ 2>/dev/null
    cp "$root"/.whl/extra/*.whl /tmp/carry/ 2>/dev/null || true; ls /tmp/carry ;;
  unpack)
    python3 - <<'PY'
import glob, io, os, sys, tarfile, zipfile
from concurrent.futures import ProcessPoolExecutor

def target_of(name):
    # vLLM, the engine add-on and a release's own torch share /tmp/site; the stand-ins have their own
    return "/tmp/site-standin" if name.startswith("site-standin") else "/tmp/site"

def extract(member_path):
    name = os.path.basename(member_path)
    target = target_of(name); os.makedirs(target, exist_ok=True)
    if name.endswith(".tar.zst"):
        import zstandard
        with open(member_path, "rb") as raw:
            stream = zstandard.ZstdDecompressor(max_window_size=2**27).stream_reader(raw)
            with tarfile.open(fileobj=stream, mode="r|") as inner:
                inner.extractall(target, filter="tar")
    else:
        with tarfile.open(member_path, mode="r:xz") as inner:
            inner.extractall(target, filter="tar")
    return f"unpacked {name} -> {target}"

data = b"".join(open(p, "rb").read() for p in sorted(glob.glob("/tmp/carry/bundle.part.*")))
os.makedirs("/tmp/carry/members", exist_ok=True)
if data:
    with tarfile.open(fileobj=io.BytesIO(data)) as outer:
        outer.extractall("/tmp/carry/members", filter="tar")
# loose wheels first (a set's zstandard, a package a set lacked): unpacked as they are
for wheel in glob.glob("/tmp/carry/*.whl") + glob.glob("/tmp/carry/members/**/*.whl", recursive=True):
    zipfile.ZipFile(wheel).extractall("/tmp/site")
    print("unpacked", os.path.basename(wheel), "-> /tmp/site")
sys.path.insert(0, "/tmp/site")
members = sorted(p for ext in ("xz", "zst") for p in glob.glob(f"/tmp/carry/members/**/*.tar.{ext}", recursive=True))
with ProcessPoolExecutor(max_workers=8) as pool:
    for line in pool.map(extract, members):
        print(line)
PY
    ;;
  bytecode)
    # what `pip install` does and `unpack` does not: compile the carried packages' .py files to .pyc
    # (the device sets PYTHONDONTWRITEBYTECODE, so without this every process compiles vLLM's modules
    # again when it imports them: part of every worker's start). KEEP=DIR first keeps a copy without
    # bytecode (hard links) for an A/B.
    [ -n "${KEEP:-}" ] && rm -rf "$KEEP" && cp -al /tmp/site "$KEEP"
    python3 -m compileall -q -j 0 /tmp/site "$root" > /dev/null 2>&1 || true
    find /tmp/site -name "*.pyc" | wc -l ;;
  env)
    # the checkout imports as `attnsel` through a link (its folder may have any name);
    # --target installs skip .pth files: FA4's cutlass needs its dsl_packages on the path by hand
    mkdir -p /tmp/attnsel-pkg && ln -sfn "$root" /tmp/attnsel-pkg/attnsel
    case "${2:-vllm}" in
      vllm) dsl=/tmp/site/nvidia_cutlass_dsl/dsl_packages   # FA4 (a release that carries cutlass-dsl)
            echo "export PYTHONPATH=/tmp/attnsel-pkg:/tmp/site$([ -d $dsl ] && echo ":$dsl")"
            # a carried torch (a release that pins another torch) finds the CUDA libraries it did not
            # bring in the machine's own torch's folders; its RPATH ($ORIGIN/../../nvidia/*/lib, searched
            # first) keeps the NCCL it brought
            if [ -d /tmp/site/torch ]; then
              sp=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
              libs=$(ls -d "$sp"/nvidia/*/lib 2>/dev/null | grep -v /nccl/ | tr '\n' ':')
              echo "export LD_LIBRARY_PATH=${libs}\${LD_LIBRARY_PATH:-}"
            fi ;;
      standin) echo "export PYTHONPATH=/tmp/attnsel-pkg:/tmp/site-standin:/tmp/site-standin/nvidia_cutlass_dsl/dsl_packages:/tmp/site ATTNSEL_TUNE_STANDINS=1" ;;
    esac ;;
  sweeps)
    # issue 10's sweep evidence: the default sweep truly cold (no FlashInfer / Triton / inductor
    # caches), then warm, with vLLM's own kernels
    out=${2:?OUT folder}; mkdir -p "$out"
    rm -rf ~/.cache/flashinfer ~/.triton /tmp/torchinductor_root ~/.cache/vllm
    timeout 330 python3 -m attnsel tune --model llama-3.1-8b --output "$out/cold" > "$out/cold.txt" 2> "$out/cold.err" || true
    timeout 200 python3 -m attnsel tune --model llama-3.1-8b --output "$out/warm" > "$out/warm.txt" 2> "$out/warm.err" || true
    grep -h "^time:" "$out"/cold/summary.txt "$out"/warm/summary.txt || true
    sed -n '/^Recommendation/,$p' "$out/warm.txt" ;;
  checks)
    # the warm sweep's FlashInfer rows re-timed by FlashInfer's own bench_gpu_time (CUPTI); the
    # stand-ins against vLLM's kernels on the decode shapes
    out=${2:?OUT folder}; warm=${3:-$out/warm}; mkdir -p "$out"
    timeout 150 python3 -m attnsel.bench.tools.fidelity "$warm" --jsonl "$out/fidelity.jsonl" > "$out/fidelity.txt" 2>&1 || true
    tail -2 "$out/fidelity.txt" | cut -c1-400
    (eval "$(bash "$0" env standin)"; timeout 240 python3 -m attnsel tune --model llama-3.1-8b --workload decode \
       --backends FLASH_ATTN,FLASHINFER,TRITON_ATTN --output "$out/standin" > "$out/standin.txt" 2> "$out/standin.err" || true)
    python3 -m attnsel.bench.tools.compare_runs "$warm" "$out/standin" --json > "$out/standin_vs_vllm.json" 2>&1 || true
    python3 -m attnsel.bench.tools.compare_runs "$warm" "$out/standin" 2>&1 | tail -4 ;;
  live)
    # explain --live / --compare-live against the installed vLLM on this GPU (issue 10, item 7)
    out=${2:?OUT folder}; mkdir -p "$out"
    for m in llama-3.1-8b gpt-oss-20b deepseek-v3 gemma-3-12b; do
      python3 -m attnsel explain --model "$m" --compare-live > "$out/live_$m.txt" 2>&1; echo "compare-live $m: exit $?"
    done
    python3 -m attnsel explain --model llama-3.1-8b --live --json > "$out/live_llama_json.json" 2>&1; echo "live json: exit $?" ;;
  mla)
    # issue 13: DeepSeek-V3 (MLA) with vLLM's own MLA classes, decode. TP 8's per-GPU heads (16) over
    # the default decode grid; TP 1 (128 heads) over the quick grid (3 shapes) to stay inside the
    # device budget. ~4 min warm on an H100 (vLLM's Triton MLA JIT-compiles per split count and page).
    out=${2:?OUT folder}; mkdir -p "$out"
    timeout 330 python3 -m attnsel tune --model deepseek-v3 -tp 8 --workload decode --output "$out/h100_mla_tp8" \
      > "$out/h100_mla_tp8.txt" 2> "$out/h100_mla_tp8.err" || true
    timeout 240 python3 -m attnsel tune --model deepseek-v3 --workload decode --quick --output "$out/h100_mla_tp1" \
      > "$out/h100_mla_tp1.txt" 2> "$out/h100_mla_tp1.err" || true
    python3 -m attnsel.bench.tools.peak_share "$out/h100_mla_tp8" "$out/h100_mla_tp1" ;;
  sparse)
    # issue 21 item 4: DeepSeek-V3.2's sparse MLA decode with vLLM's own sparse classes (vLLM >= 0.25:
    # FLASH_ATTN_MLA_SPARSE, vLLM's Hopper pick, and FLASHMLA_SPARSE) at the per-GPU heads of TP 1, 2,
    # 4 and 8 (128, 64, 32, 16), each decode token over the indexer's top-k (2048). Both run 64-token
    # kernel pages, so --block-size 64 only (vLLM's default for them). 121 s for all four on an H100
    # (vLLM 0.26.0, the "engine" set; 22 rows per TP). vLLM 0.30+ adds FLASHINFER_MLA_SPARSE_SM90, whose FA3
    # MLA module FlashInfer JIT-compiles on its first use (nvcc, minutes) unless its JIT cache holds it:
    # hence up to 360 s a row (tune's --timeout, 180 by default, counts JIT) and 600 s per TP; the cache it
    # writes serves the later TPs.
    out=${2:?OUT folder}; mkdir -p "$out"
    python3 -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
    for tp in 8 4 2 1; do
      timeout 600 python3 -m attnsel tune --model deepseek-v3.2 -tp "$tp" --workload decode --block-sizes 64 --timeout 360 \
        --output "$out/h100_sparse_tp$tp" > "$out/h100_sparse_tp$tp.txt" 2> "$out/h100_sparse_tp$tp.err" || true
      echo "== TP $tp: $(grep -h "vLLM's default" "$out/h100_sparse_tp$tp.txt" | head -1)"
      sed -n '/^Recommendation/,/^$/p' "$out/h100_sparse_tp$tp.txt" | head -12
      grep -h "error\|Error" "$out/h100_sparse_tp$tp.err" | tail -3
    done ;;
  sparse-verify)
    # optional (needs the "engine" set): vLLM's engine on one GPU with a DeepSeek-V3.2-shaped model whose
    # attention is the TP-8 shard's (16 heads, latent 512 + 64, index_topk 2048), 4 layers, 32 experts,
    # bf16 dummy weights (the fp8 checkpoint's block GEMMs left out): tune that shard (quick grid), then
    # verify vLLM's default against both sparse backends. (Verifying the `-tp 8` run itself asks vLLM for
    # 8 GPUs: ParallelConfig refuses it on one.) Ran on an H100 with vLLM 0.26: engines start in ~2-4 min.
    out=${2:?OUT folder}; mkdir -p "$out/dsv32_tp8_shard"
    python3 - "$root/attention/models/deepseek-v3.2.json" "$out/dsv32_tp8_shard/config.json" <<'PY'
import json, sys
c = {k: v for k, v in json.load(open(sys.argv[1])).items() if not k.startswith("_") and k != "quantization_config"}
c.update(num_attention_heads=16, num_key_value_heads=16, num_hidden_layers=4, first_k_dense_replace=1,
         n_routed_experts=32, num_nextn_predict_layers=0)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
    timeout 120 python3 -m attnsel tune --model "$out/dsv32_tp8_shard/config.json" --workload decode --block-sizes 64 \
      --quick --output "$out/sparse_shard" > "$out/sparse_shard.txt" 2>&1 || true
    timeout 560 python3 -m attnsel verify "$out/sparse_shard" --candidates FLASH_ATTN_MLA_SPARSE:64,FLASHMLA_SPARSE:64 \
      --shapes 1x4096,64x4096,256x1024 --repeats 3 --start-timeout 300 --output "$out/sparse_verify" \
      > "$out/sparse_verify.txt" 2> "$out/sparse_verify.err" || true
    grep -A2 "^Verdict" "$out/sparse_verify.txt"; tail -3 "$out/sparse_verify.err" | cut -c1-300 ;;
  fp8)
    # issue 13: Llama-3.1-8B with an fp8 KV cache (FA3's fp8 path, FlashInfer's fp8 KV, vLLM's Triton
    # kernel), decode at block sizes 16/64/128 (FLEX_ATTENTION is refused by vLLM for fp8); then the
    # GPU tests of every fp8 and MLA provider against the fp32 reference (incl. FlashInfer's MLA
    # wrapper and attnsel's Triton fp8 path). ~4 min.
    out=${2:?OUT folder}; mkdir -p "$out"
    timeout 330 python3 -m attnsel tune --model llama-3.1-8b --kv-cache-dtype fp8 --workload decode \
      --block-sizes 16,64,128 --output "$out/h100_fp8" > "$out/h100_fp8.txt" 2> "$out/h100_fp8.err" || true
    python3 -m attnsel.bench.tools.peak_share "$out/h100_fp8"
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/test_kernels_mla_fp8_gpu.py \
      > "$out/gpu_tests_mla_fp8.txt" 2>&1 || true
    tail -15 "$out/gpu_tests_mla_fp8.txt" ;;
  engine-tunes)
    # the decode sweeps `attnsel verify` compares against in the engine (issue 16): Qwen3-0.6B up to
    # 32k context (attention is a large share of its step) and Nemotron-H-8B (hybrid)
    out=${2:?OUT folder}; mkdir -p "$out"
    timeout 200 python3 -m attnsel tune --model qwen3-0.6b --full --workload decode --block-sizes 16,128 \
      --backends FLASH_ATTN,FLASHINFER,TRITON_ATTN --output "$out/qwen06" > "$out/qwen06.tune.txt" 2>&1 || true
    timeout 150 python3 -m attnsel tune --model nemotron-h-8b --workload decode --backends FLASH_ATTN,FLASHINFER,TRITON_ATTN --output "$out/nemotron_h" \
      > "$out/nemotron_h.tune.txt" 2>&1 || true
    grep -h "^time:\|vLLM flags\|overall" "$out"/qwen06/summary.txt "$out"/nemotron_h/summary.txt || true ;;
  speed)
    # issue 25's table in one command, < 9 min on an H100 with the carried vLLM 0.24 set: `tune` as
    # typed with the caches emptied, the same warm, `probe --json` x7, `verify` with 3 engines; each
    # step under `timeout`, stopping at the first that fails; then one summary table
    # (bench/tools/speed_summary.py, docs/tune-performance.md "Speed benchmark"). The commands run the
    # attnsel on PYTHONPATH: point it at another checkout for the "before" figures.
    out=${2:?OUT folder}; mkdir -p "$out"; rm -f "$out/steps.txt"
    step() {  # step NAME LIMIT_S CMD...: runs CMD, records "NAME exit seconds" in steps.txt
      local name=$1 limit=$2 t0 rc=0; shift 2; t0=$(date +%s.%N)
      timeout -k 10 "$limit" "$@" > "$out/$name.txt" 2> "$out/$name.err" || rc=$?
      echo "$name $rc $(python3 -c "print(round($(date +%s.%N) - $t0, 1))")" >> "$out/steps.txt"
      [ "$rc" = 0 ] || { echo "$name failed (exit $rc): $(tail -c 300 "$out/$name.err")" >&2; return 1; }
    }
    rm -rf ~/.cache/flashinfer ~/.triton /tmp/torchinductor_root ~/.cache/vllm ${TORCHINDUCTOR_CACHE_DIR:+"$TORCHINDUCTOR_CACHE_DIR"}
    # SPEED_STEPS="tune" or "verify" runs one half (side by side in two lanes: bench/tools/gpu_lanes.sh);
    # SPEED_LIMIT_SCALE stretches every step's limit (an older checkout's slower verify)
    steps=${SPEED_STEPS:-tune verify}; scale=${SPEED_LIMIT_SCALE:-1}
    limit() { python3 -c "print(int($1 * $scale))"; }
    tune=(python3 -m attnsel tune --head-size 128 --dtype bf16)
    if [[ " $steps " == *" tune "* ]]; then
      step tune_cold "$(limit 200)" "${tune[@]}" --output "$out/tune_cold" \
        && step tune_warm "$(limit 75)" "${tune[@]}" --output "$out/tune_warm" \
        && step probe 30 python3 -m attnsel.bench.tools.probe_speed --runs 7 || status=1
    fi
    if [[ " $steps " == *" verify "* ]] && [ "${status:-0}" = 0 ]; then
      step verify "$(limit 230)" python3 -m attnsel verify --model llama-3.1-8b --candidates FLASHINFER:16,TRITON_ATTN:16 \
           --shapes 1x32768,4x16384,64x4096 --output "$out/verify" || status=1
    fi
    python3 "$root/bench/tools/speed_summary.py" "$out" | tee "$out/summary.md"
    exit "${status:-0}" ;;
  smoke)
    # a short first run: the timers, one quick sweep with vLLM's kernels, a fidelity sample, live explain
    out=${2:?OUT folder}; mkdir -p "$out"
    python3 -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)" 2>&1 | tail -1
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_bench_gpu_timing.py 2>&1 | tail -3
    python3 -m attnsel tune --model llama-3.1-8b --quick --output "$out/quick" > "$out/quick.txt" 2> "$out/quick.err" || true
    tail -25 "$out/quick.txt"; grep -h "error\|Error" "$out/quick.err" | tail -5
    python3 -m attnsel.bench.tools.fidelity "$out/quick" --limit 12 --jsonl "$out/fidelity.jsonl" > "$out/fidelity.txt" 2>&1 || true
    tail -14 "$out/fidelity.txt"
    python3 -m attnsel explain --model llama-3.1-8b --compare-live > "$out/live.txt" 2>&1 || true
    tail -8 "$out/live.txt" ;;
  *) sed -n '2,24p' "$0" ;;
esac
