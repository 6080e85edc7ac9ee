"""The Proposer: compose or ask a model for reference modules, validate them, reward the frontier.

Modules: composer/builder/emit/render (programmatic synthesis), llm (model-written modules),
validate (the validation check), dedup (canonical AST form), reward (frontier reward), task_pool
(task pool), pipeline (propose N validated modules). Import the submodule you need; this package
imports nothing.
"""
