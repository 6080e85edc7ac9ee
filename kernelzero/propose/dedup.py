"""Duplicate detection by a canonical form of a module's AST.

Canonical form: the AST of the source with formatting and comments gone (they never reach the
AST), docstrings dropped, every constant value replaced by a placeholder of its kind, and every
name the file itself binds (variables, arguments, attributes stored on `self`, constants,
helper functions and classes) renamed by order of first appearance. Names the file does not bind
(`torch`, `nn`, `F`, API attributes such as `.relu`) are kept, so two modules are duplicates
exactly when they call the same APIs in the same structure, whatever the names and sizes.
Not covered: semantic equivalence (`x * 2` vs `x + x` are different modules).
"""
from __future__ import annotations

import ast
import hashlib

from kernelzero.tasks.task import parse_python

KEEP = frozenset({"Model", "forward", "get_inputs", "get_init_inputs", "self", "super",
                  "__init__"})


def _bound_names(tree: ast.AST) -> set[str]:
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            bound.add(node.attr)
    return bound - KEEP


class _Canon(ast.NodeTransformer):
    def __init__(self, bound: set[str]):
        self.bound, self.map = bound, {}

    def name(self, n: str) -> str:
        if n not in self.bound:
            return n
        return self.map.setdefault(n, f"v{len(self.map)}")

    def visit_Name(self, node):
        node.id = self.name(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self.name(node.arg), None
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            node.attr = self.name(node.attr)
        return node

    def visit_FunctionDef(self, node):
        node.name = self.name(node.name)
        node.returns = None
        _drop_docstring(node)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node):
        node.name = self.name(node.name)
        _drop_docstring(node)
        self.generic_visit(node)
        return node

    def visit_Constant(self, node):
        kind = type(node.value).__name__
        return ast.copy_location(ast.Constant(value=f"<{kind}>"), node)


def _drop_docstring(node) -> None:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]


def canonical_form(source: str) -> str:
    """The canonical text of a module (raises SyntaxError when it does not parse)."""
    tree = parse_python(source)
    _drop_docstring(tree)
    tree = _Canon(_bound_names(tree)).visit(tree)
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def canonical_hash(source: str) -> str:
    return hashlib.sha256(canonical_form(source).encode()).hexdigest()[:16]


class Deduper:
    """Remembers canonical hashes; `seen(source)` says whether an equivalent module came before."""

    def __init__(self, hashes=()):
        self.hashes: set[str] = set(hashes)

    def seen(self, source: str) -> bool:
        return canonical_hash(source) in self.hashes

    def add(self, source: str) -> str:
        h = canonical_hash(source)
        self.hashes.add(h)
        return h
