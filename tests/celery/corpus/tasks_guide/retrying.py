# The Tasks guide's retry examples ("Retrying", "Automatic retry for known exceptions"),
# with the failures made deterministic (they depend on self.request.retries).
import os

from pgtasks.celery import Celery, Task

app = Celery("retrying", broker=os.environ["PGTASKS_DSN"])


@app.task(bind=True, max_retries=3, default_retry_delay=0)
def send_twitter_status(self, failures):
    try:
        if self.request.retries < failures:
            raise ConnectionError(f"fail whale {self.request.retries}")
    except ConnectionError as exc:
        raise self.retry(exc=exc)
    return {"retries": self.request.retries, "id_is_set": self.request.id is not None}


@app.task(bind=True, max_retries=2)
def without_exc(self):
    raise self.retry(countdown=0)


@app.task(autoretry_for=(ZeroDivisionError,), retry_kwargs={"max_retries": 2, "countdown": 0})
def divide(a, b):
    return a / b


@app.task(
    bind=True,
    autoretry_for=(KeyError,),
    retry_backoff=False,
    retry_kwargs={"max_retries": 5, "countdown": 0},
)
def lookup(self, key, succeed_after):
    if self.request.retries < succeed_after:
        raise KeyError(key)
    return [key, self.request.retries]


@app.task(bind=True, max_retries=None, default_retry_delay=0)
def until_third(self):
    if self.request.retries < 3:
        raise self.retry()
    return self.request.retries


class RecordingTask(Task):
    def after_return(self, status, retval, task_id, args, kwargs, einfo):
        print(f"after_return {status} {retval!r}")


@app.task(base=RecordingTask, bind=True)
def with_hooks(self, value):
    return {"value": value, "task": self.name}


@app.task(name="retrying.custom_name", ignore_result=True, acks_late=True, rate_limit="100/s")
def renamed(x):
    return x * 3
