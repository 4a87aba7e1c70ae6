# "Next Steps": proj/celery.py
import os

from pgtasks.celery import Celery

app = Celery("proj", broker=os.environ["PGTASKS_DSN"], include=["proj.tasks", "proj.errors"])

# Optional configuration, see the application user guide.
app.conf.update(
    result_expires=3600,
)

if __name__ == "__main__":
    app.start()
