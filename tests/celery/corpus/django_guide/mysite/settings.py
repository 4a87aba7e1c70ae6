import os

SECRET_KEY = "not-a-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["demoapp"]
DATABASES = {}

# Celery Configuration Options
CELERY_BROKER_URL = os.environ["PGTASKS_DSN"]
CELERY_TIMEZONE = "Australia/Tasmania"
CELERY_TASK_TRACK_STARTED = True
CELERY_TASK_TIME_LIMIT = 30 * 60
CELERY_TASK_ROUTES = {"demoapp.tasks.*": {"queue": "demo"}}
