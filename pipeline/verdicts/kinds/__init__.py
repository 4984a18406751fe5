"""The claim kinds, a plugin package: each module here declares claim kinds (`ClaimSpec` subclasses), each registering
itself (`@register_claim_kind`, pipeline/verdicts/claim.py). `claims_file` loads them all (`load_plugins`) and builds
its union from them; adding a kind is adding a module, and no list in the project names it. A kind's module imports
`claim`, the rules and other kinds, never `claims_file` (which imports this package). A module named `_*` is a
helper, not loaded as a kind.
"""
