"""Creates pgtasks' schema (its tables) with pgtasks' own migrations.

Later pgtasks versions add migrations of their own: every ``manage.py migrate`` applies
them (a post_migrate handler), so this Django migration stays the only one.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from pgtasks.contrib.django.models import jobs_table


def apply_pgtasks_migrations(apps: Any, schema_editor: Any) -> None:
    from pgtasks.contrib.django.config import pgtasks_settings
    from pgtasks.contrib.django.schema import migrate_schema

    alias = schema_editor.connection.alias
    if alias == pgtasks_settings()["DATABASE"]:
        migrate_schema(alias)


class Migration(migrations.Migration):  # type: ignore[misc]
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.RunPython(apply_pgtasks_migrations, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="Job",
            fields=[],
            # db_table names settings.PGTASKS["SCHEMA"]; unmanaged: Django creates nothing.
            options={
                "managed": False,
                "db_table": jobs_table(),
                "ordering": ("-id",),
                "verbose_name": "job",
            },
        ),
    ]
