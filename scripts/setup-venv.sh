#!/usr/bin/env bash
# Creates the test virtual environment (.venv, ignored by git) with a pinned
# PyTorch from PyPI when it is missing. The Linux wheel imports on a machine
# without a GPU and brings the real libcudart and libnccl that the torch,
# cuda.runtime and nccl.library checks are tested against; prometheus-client
# and markdown-it-py parse the Prometheus and Markdown reports in tests;
# py-spy reads the live test jobs' stacks (gpucheck job).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="${GPUCHECK_TEST_TORCH:-2.15.0}"
VENV=.venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, xmlschema, prometheus_client, markdown_it; assert torch.__version__.startswith('$TORCH_VERSION')" 2>/dev/null && [ -x "$VENV/bin/py-spy" ]; then
  exit 0
fi
echo "setup-venv: creating $VENV with torch==$TORCH_VERSION (about 5.7 GB, first run only)" >&2
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" "xmlschema==3.4.3" "numpy==2.4.6" "prometheus-client==0.26.0" "markdown-it-py==4.3.0" "py-spy==0.4.3"
"$VENV/bin/python" -c "import torch; print('setup-venv: torch', torch.__version__, 'cuda', torch.version.cuda)" >&2
