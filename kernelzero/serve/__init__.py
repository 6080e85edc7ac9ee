"""The reward service and its client: judging over HTTP for trainers in other processes.

`kernelzero.serve.app` (FastAPI; needs `pip install 'kernelzero[serve]'`) serves a pool;
`kernelzero.serve.client.RewardClient` talks to it with the evaluator's own API;
verl's `compute_score` is in `kernelzero.train.verl` (a training-engine adapter, beside TRL's).
Nothing here is imported by `eval`.
"""
