"""The shared types of the flow, below every step: results and their statuses (`results`), the
comparison of paired timings (`comparison`), what a run is given and what it measures
(`settings`, `running`), and the built-candidate record (`built`). It imports nothing from the
flow's folders (discovery, search, specs, build, evaluation, ...): they all import it."""
