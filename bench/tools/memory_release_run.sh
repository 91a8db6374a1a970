#!/usr/bin/env bash
# vLLM 0.33 and 0.34 engine memory records on an offline GPU machine, in one lease (issue 32).
# 0.34 pins the same torch 2.14 as 0.33, so it rides as an overlay on 0.33's carried set: its own vLLM and
# FlashInfer (0.7.4: its 0.7.3 pin is not on PyPI) in /tmp/site34, first on PYTHONPATH.
#   here:   VLLM_RELEASE=0.33.0 bash bench/tools/gpu_session.sh pack      (.whl/p1..pN)
#           bash bench/tools/memory_release_run.sh pack-overlay           (.whl34/q1..qM)
#   there:  bash bench/tools/gpu_session.sh receive  (a call per .whl/pK part), then
#           bash bench/tools/memory_release_run.sh receive-overlay  (a call per .whl34/qK part), then
#           bash bench/tools/memory_release_run.sh unpack
#           bash bench/tools/memory_release_run.sh record 0.34 OUT [case,case,...]   (or 0.33)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cmd=${1:-help}
case "$cmd" in
  pack-overlay)
    w=$(mktemp -d); mkdir -p "$w/site" "$w/dl" "$w/out"
    PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --python-version 3.12 -d "$w/dl" vllm==0.34.0 flashinfer-python==0.7.4
    PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --no-deps --no-compile --target "$w/site" "$w"/dl/*.whl
    # shellcheck disable=SC1090
    source <(sed -n '/^strip_vllm()/,/^}/p; /^strip_flashinfer_sources()/,/^}/p' "$root/bench/tools/gpu_session.sh")
    strip_vllm "$w/site"; strip_flashinfer_sources "$w/site"; rm -rf "$w/site/bin"
    for g in vllm flashinfer; do tar cf - -C "$w/site" "$g" | zstd -q -T0 -9 --long=27 > "$w/out/site34-$g.tar.zst"; done
    (cd "$w/site" && ls | grep -vx -e vllm -e flashinfer | tar cf - -T -) | zstd -q -T0 -9 > "$w/out/site34-rest.tar.zst"
    cd "$root" && rm -rf .whl34 && mkdir -p .whl34
    grep -qx '/.whl34/' .git/info/exclude 2>/dev/null || echo '/.whl34/' >> .git/info/exclude
    tar cf - -C "$w/out" . | split -b 40M -a 2 - .whl34/bundle34.part.
    n=0; for f in .whl34/bundle34.part.*; do n=$((n + 1)); mkdir -p ".whl34/q$n"; mv "$f" ".whl34/q$n/"; done
    rm -rf "$w"; echo "$n parts" ;;
  receive-overlay)
    mkdir -p /tmp/carry34 && cp "$root"/.whl34/q*/bundle34.part.* /tmp/carry34/ && ls /tmp/carry34 ;;
  unpack)
    bash "$root/bench/tools/gpu_session.sh" unpack > /tmp/unpack.log
    mkdir -p /tmp/carry34/members /tmp/site34
    cat /tmp/carry34/bundle34.part.* | tar xf - -C /tmp/carry34/members
    for m in /tmp/carry34/members/*.tar.zst; do
      PYTHONPATH=/tmp/site python3 -c "import sys, tarfile, zstandard
with open(sys.argv[1], 'rb') as raw:
    tarfile.open(fileobj=zstandard.ZstdDecompressor(max_window_size=2**27).stream_reader(raw), mode='r|').extractall('/tmp/site34', filter='tar')" "$m" &
    done; wait
    # as pip would: bytecode, so that no engine process compiles vLLM's modules again (PYTHONDONTWRITEBYTECODE)
    python3 -m compileall -q -j 0 /tmp/site /tmp/site34 "$root" > /dev/null 2>&1 || true
    ls /tmp/site34 ;;
  record)
    release=${2:?0.33 or 0.34}; out=${3:?OUT}; only=${4:-}
    eval "$(bash "$root/bench/tools/gpu_session.sh" env vllm)"
    [ "$release" = 0.34 ] && export PYTHONPATH=/tmp/site34:$PYTHONPATH
    python3 -c "import vllm, flashinfer; print('vllm', vllm.__version__, 'flashinfer', flashinfer.__version__)"
    mkdir -p "$out"
    python3 -m attnsel.bench.tools.memory_record --cases release --out "$out" --start-timeout "${START_TIMEOUT:-240}" \
      ${only:+--only "$only"} 2>&1 | grep -v "^\s*$" | tail -80 ;;
  *) sed -n 2,12p "$0" ;;
esac
