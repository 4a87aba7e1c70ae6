"""The store layer: the only place that runs SQL (pgtasks/sql/), connections and migrations."""
