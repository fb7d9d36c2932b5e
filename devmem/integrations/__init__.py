"""Integrations of devmem with serving engines that size their own KV cache.

Each integration is a module that imports its engine only when it is used, so importing ``devmem`` or this
package imports neither the engine nor torch:

- :mod:`devmem.integrations.transformers`: Hugging Face transformers' continuous batching
  (``model.generate_batch``, ``init_continuous_batching``), ``pip install -e ".[transformers]"`` from the checkout.
- :mod:`devmem.integrations.vllm`: a ``vllm.general_plugins`` plugin sizing stock vLLM's KV cache,
  ``pip install -e ".[vllm]"`` from the checkout (docs/vllm.md).
"""
