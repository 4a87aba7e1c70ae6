# demoapp/tasks.py: the Django guide's "Using the @shared_task decorator".
from pgtasks.celery import shared_task


@shared_task
def add(x, y):
    return x + y


@shared_task
def mul(x, y):
    return x * y


@shared_task
def xsum(numbers):
    return sum(numbers)
