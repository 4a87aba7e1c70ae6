"""Django 6.0's own tests of ``django.tasks`` run against pgtasks' backend
(``python3 dev.py test-django-conformance``; see run.py)."""
