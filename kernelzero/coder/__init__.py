"""The Coder's text side: prompts for a task, code extraction from a completion, repair turns.

Nothing here runs a candidate; judging is the evaluator's job.
"""
