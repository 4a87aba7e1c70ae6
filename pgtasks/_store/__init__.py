"""Store: the only place that runs SQL (queries in pgtasks/sql/), connections and migrations."""
