"""What the transformers integration's tests watch in a model: the forwards it runs."""

from __future__ import annotations


class Forwards:
    """Counts the model's forwards: a refusal must come before the engine runs one."""

    def __init__(self, model):
        self.count = 0
        model.register_forward_hook(self._hook)

    def _hook(self, *args):
        self.count += 1
