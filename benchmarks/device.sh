#!/bin/bash
# One call on a lent GPU machine (the `device` tool's `run`, carry [".whl"]): versions and CPU
# topology, chapter 08's GPU benchmark (`benchmarks.pipeline.run --device cuda`: segments timed
# with CUDA events, recorded under data/pipeline/), what a late message costs there
# (`benchmarks.schedules.messages`), then the held-out benchmark on its idle CPU cores in
# STREAMS parallel streams (each its own copy of the checkout, one model list each; a command
# keeps at most three threads busy, so two streams leave most of the cores idle).
# Everything lands in $OUT as it goes. Its image lacks highspy: first, here,
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl highspy==1.15.1   (.whl ignored by .git/info/exclude)
# Run as: BUDGET=560 bash benchmarks/device.sh
export PYTHONUNBUFFERED=1
T0=$(date +%s); BUDGET=${BUDGET:-560}
cd "$(dirname "$0")/.."
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
{ date -u; nproc; lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))"; uptime; python3 -V
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  python3 -c "import torch,transformers,torchvision,numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchvision', torchvision.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && echo wheels ok
} > $OUT/env.txt 2>&1
export PYTHONPATH=/tmp/site:$PWD
if [ -z "$SKIP_GPU" ]; then
  timeout ${GPU_S:-150} python3 -m benchmarks.pipeline.run --device cuda > $OUT/pipeline_cuda.log 2>&1
  echo "rc=$? at $(( $(date +%s) - T0 ))s" >> $OUT/pipeline_cuda.log
  mkdir -p $OUT/pipeline && cp -r data/pipeline benchmarks/pipeline/results.json benchmarks/pipeline/README.md $OUT/pipeline/ 2>/dev/null
fi
timeout 60 python3 -m benchmarks.schedules.messages --pairs 3 > $OUT/messages.log 2>&1
echo "rc=$?" >> $OUT/messages.log
STREAMS=${STREAMS:-"distilbert,gpt_neo shufflenet,regnet"}
LEFT=$(left); echo "heldout gets ${LEFT}s in streams: $STREAMS" >> $OUT/env.txt
i=0
for s in $STREAMS; do
  i=$((i+1)); rm -rf /tmp/s$i; cp -r . /tmp/s$i; rm -f /tmp/s$i/benchmarks/schedules/heldout.json
  ( cd /tmp/s$i && PYTHONPATH=/tmp/site:/tmp/s$i timeout $LEFT python3 -m benchmarks.schedules.heldout --models ${s//,/ } \
      > $OUT/heldout$i.log 2>&1; echo "rc=$?" >> $OUT/heldout$i.log
    cp benchmarks/schedules/heldout.json $OUT/heldout$i.json 2>/dev/null ) &
done
wait
{ uptime; date -u; } >> $OUT/env.txt
