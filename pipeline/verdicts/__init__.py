"""Claims and their verdicts: the papers' claims and the project's own questions (`claims.yaml`), and the
statistical rules that judge them against our runs.

`claims_file` reads, judges and counts the claims; `claim` is what every kind shares, and each kind is a class
of a module of the plugin package `kinds` that registers itself (`value`, `order`, `trend`, `one_value`,
`correlation`, `spread`, `unmeasured` today). The rules they call
are leaves of numpy and scipy: `estimates` (the interval of a difference, both noises counted), `rules`
(the verdict from an interval, a family, a correlation or a spread), `decidable` (what a comparison could
decide, and the seeds it would take), `sequential` (looks of seeds with α-spending boundaries: stop
as soon as a claim is decided) and `verdict_names` (the verdicts as the report prints them).
"""
