"""The planner: pure KV-cache arithmetic (:mod:`.sizing`), models read from their configs (:mod:`.models`,
:mod:`.model_defaults`), capacity in tokens and sequences (:mod:`.capacity`) and vLLM's layout of a budget
(:mod:`.engine_layout`). Nothing here reads a device."""
