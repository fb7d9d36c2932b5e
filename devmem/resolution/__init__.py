"""Plugin resolution: the ``devmem`` entry points read fast (:mod:`.entrypoints`), each backend's platforms found and
probed (:mod:`.discovery`), one chosen and cached per process (:mod:`.plugins`: ``current_platform``)."""
