"""The reward service and its client: judging over HTTP for trainers in other processes.

`kernelzero.serve.app` (FastAPI; needs `pip install 'kernelzero[serve]'`) serves a pool;
`kernelzero.serve.client.RewardClient` talks to it with the evaluator's own API;
`kernelzero.serve.verl` is a `compute_score` for verl. Nothing here is imported by `eval`.
"""
