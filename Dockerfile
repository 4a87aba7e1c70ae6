# Image for the example pgtasks deployment in docker-compose.yml (migrate, worker, beat).
# Build context: the repository root.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

WORKDIR /app

# Install the package first so that editing the examples does not bust this layer.
COPY pyproject.toml README.md LICENSE ./
COPY pgtasks ./pgtasks
RUN pip install . && rm -rf build pgtasks.egg-info

# The example application, imported as examples.app:app (PYTHONPATH=/app).
COPY examples ./examples

RUN useradd --system --create-home --uid 10001 pgtasks
USER pgtasks

CMD ["pgtasks", "--help"]
