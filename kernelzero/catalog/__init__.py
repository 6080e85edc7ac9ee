"""The operator catalog: API specs (specs.py), their shape rules (shapes.py), cost model
(cost.py), recognising APIs in source (apimap.py), co-occurrence mining and sampling
(cooccurrence.py) and how the shipped default distribution was made (default_dist.py). Import
the submodule you need; this package imports nothing."""
