# "First Steps with Celery": tasks.py
import os

from pgtasks.celery import Celery

app = Celery("tasks", broker=os.environ["PGTASKS_DSN"])


@app.task
def add(x, y):
    return x + y
