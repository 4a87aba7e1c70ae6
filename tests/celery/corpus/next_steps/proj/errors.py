# The Canvas guide's error callback ("Error handling"): it logs to proj/error_log/
# (the guide's /var/errors), one file per failed task id.
import os

from .celery import app

ERRORS = os.path.join(os.path.dirname(__file__), "error_log")


@app.task
def log_error(request, exc, traceback):
    os.makedirs(ERRORS, exist_ok=True)
    with open(os.path.join(ERRORS, request.id), "a") as fh:
        print(f"--\n\n{request.id} {exc} {traceback}", file=fh)
        print(f"task={request.task} args={request.args!r}", file=fh)
