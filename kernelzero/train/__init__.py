"""Training: cold-start distillation (SFT), CA-GRPO for the Coder, GRPO for the Proposer, and the
alternating Proposer–Coder loop.

The reward formulas live in `rewards` as plain functions with no engine imports; everything that
touches TRL is in the thin adapters (`ca_grpo`, `proposer_grpo`, `sft`). Importing this package
imports nothing heavy.
"""
