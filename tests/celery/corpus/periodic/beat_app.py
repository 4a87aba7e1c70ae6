# "Periodic Tasks": entries added by on_after_configure and by beat_schedule.
import os

from pgtasks.celery import Celery
from pgtasks.celery.schedules import crontab

app = Celery("beat_app", broker=os.environ["PGTASKS_DSN"])
app.conf.timezone = "Europe/London"


@app.on_after_configure.connect
def setup_periodic_tasks(sender, **kwargs):
    # Calls test('hello') every second.
    sender.add_periodic_task(1.0, test.s("hello"), name="add every 1")

    # Executes every Monday morning at 7:30 a.m.
    sender.add_periodic_task(
        crontab(hour=7, minute=30, day_of_week=1),
        test.s("Happy Mondays!"),
    )


@app.task
def test(arg):
    print(arg)
    return arg


@app.task
def add(x, y):
    return x + y


app.conf.beat_schedule = {
    "add-every-30-seconds": {
        "task": "beat_app.add",
        "schedule": 30.0,
        "args": (16, 16),
    },
    "add-every-monday-morning": {
        "task": "beat_app.add",
        "schedule": crontab(hour=7, minute=30, day_of_week=1),
        "args": (16, 16),
    },
}
