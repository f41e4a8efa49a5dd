#!/bin/bash
# One call on a lent GPU machine (the `device` tool's `run`, carry [".whl"]): versions, the GPU
# paths (a CUDA-event profile, a plan timed on the GPU, a one-rank NCCL run with --check, the
# one-line refusal of two ranks on one GPU), then the held-out benchmark on its idle CPU cores.
# Everything lands in $OUT as it goes. Its image lacks highspy: first, here,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl highspy==1.15.1   (.whl ignored by .git/info/exclude)
# Run as: BUDGET=530 bash benchmarks/device.sh
export PYTHONUNBUFFERED=1
T0=$(date +%s); BUDGET=${BUDGET:-540}
cd "$(dirname "$0")/.."
{ date -u; nproc; grep -m1 "model name" /proc/cpuinfo; uptime; python3 -V
  python3 -c "import torch,transformers,torchvision,numba,numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchvision', torchvision.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && echo wheels ok
} > $OUT/env.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD
DP=(python3 -c 'import sys; from devplace_lite.cli import main; sys.exit(main())')
{
  echo "== profile gpt on CUDA events"; timeout 60 "${DP[@]}" profile gpt --size tiny --spec cuda-measured --out /tmp/g.json --json; echo "rc=$?"
  echo "== plan gpt -k 2 timed on the GPU"; timeout 60 "${DP[@]}" plan gpt -k 2 --device cuda --out /tmp/p2 --json; echo "rc=$?"
  echo "== plan gpt -k 1 on the GPU, run with NCCL"; timeout 90 "${DP[@]}" plan gpt -k 1 --device cuda --run --check --out /tmp/p1 --json; echo "rc=$?"
  echo "== plan gpt -k 2 --run on one GPU: refused in one line"; timeout 60 "${DP[@]}" plan gpt -k 2 --device cuda --run --out /tmp/p3; echo "rc=$?"
} > $OUT/gpu.txt 2>&1
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
echo "heldout gets ${LEFT}s" >> $OUT/env.txt
timeout $LEFT python3 -m benchmarks.schedules.heldout ${HELDOUT_ARGS:---models distilbert gpt_neo regnet shufflenet} > $OUT/heldout.log 2>&1
echo "rc=$?" >> $OUT/heldout.log
cp benchmarks/schedules/heldout.json $OUT/heldout_device.json 2>/dev/null
cp benchmarks/schedules/heldout.md $OUT/heldout_device.md 2>/dev/null
uptime >> $OUT/env.txt
