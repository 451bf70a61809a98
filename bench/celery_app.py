"""The Celery app of the peers benchmark: no-op tasks on a Redis broker and result backend.

The worker process is ``celery -A bench.celery_app:app worker …`` with ``BENCH_CELERY_URL`` and
``BENCH_CELERY_QUEUE`` in its environment; the benchmark process calls :func:`configure` itself.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

app = Celery("a2amesh_bench")


def configure(url: str, queue: str) -> None:
    """Point the app at ``url`` (broker and result backend) and route every task to ``queue``."""
    app.conf.update(
        broker_url=url,
        result_backend=url,
        task_default_queue=queue,
        result_expires=600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )


@app.task(name="bench.noop")
def noop(value: Any = None) -> Any:
    """Return the value unchanged (one chain or chord node)."""
    return value


@app.task(name="bench.collect")
def collect(values: list[Any]) -> int:
    """The chord's callback: count the results of the fan-out."""
    return len(values)


if "BENCH_CELERY_URL" in os.environ:
    configure(os.environ["BENCH_CELERY_URL"], os.environ.get("BENCH_CELERY_QUEUE", "a2amesh-bench"))
