"""Settle a claim within a budget (`python -m stages settle <claim id>`, docs/scaling.md).

A claim the committed run leaves undecided is given more training seeds in rounds (`rounds`): each
round's seeds are queued as DVC experiments of the claim's arms only, the claim is judged again at
each look by the sequential rule that keeps its error rate across looks
(`pipeline.verdicts.sequential`), and the rounds stop when it is decided, when the budget left could
not decide it (futility), or when the budget is spent. The looks, their cost and the decision go to
`reports/settle/<claim id>.json` with a figure (`record`). `target` reads what a claim compares and
what one seed of it costs.
"""
