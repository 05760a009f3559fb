# The slim image of the VQA worker (python -m ehrxqa_pipeline.cli.vqa_worker): the reference model's training and
# prediction, launched through Dagster Pipes, with torch and no Dagster (dagster-pipes only). It reads the
# workspace file the step wrote and the JPEGs, and writes the model and predictions, on the shared volume.
# Build from the repository root:   docker build -f deploy/vqa-worker.Dockerfile -t REGISTRY/ehrxqa-vqa:TAG .
# The packages are the worker's imports, at pyproject.toml's pins (tests/test_deploy.py keeps both in step);
# the pinned torch wheel from PyPI runs on CUDA nodes with a recent NVIDIA driver, no CUDA toolkit needed.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    MPLBACKEND=Agg \
    EHRXQA_HOME=/data/ehrxqa

WORKDIR /opt/ehrxqa
COPY pyproject.toml README.md ./
COPY ehrxqa_pipeline ./ehrxqa_pipeline

RUN pip install torch==2.14.1 torchvision==0.29.1 duckdb==1.5.6 polars==2.1.0 pillow==12.3.0 \
        opencv-python-headless==4.14.0.94 matplotlib==3.11.2 numpy==2.4.6 "pyyaml>=6,<7" \
        dagster-pipes==1.13.27 \
    && pip install --no-deps -e . \
    && useradd --uid 1000 --create-home ehrxqa && mkdir -p /data/ehrxqa && chown ehrxqa /data/ehrxqa

USER ehrxqa
ENTRYPOINT ["python", "-m", "ehrxqa_pipeline.cli.vqa_worker"]
