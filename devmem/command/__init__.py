"""The ``devmem`` command: the parser and dispatch (:mod:`.main`), a module per command (:mod:`.info`, :mod:`.top`,
:mod:`.plugins`, :mod:`.doctor` with its findings, :mod:`.plan`, :mod:`.fit`), what they share (:mod:`.common`,
the flags' values in :mod:`.flags`, the device sample in :mod:`.devices`, ``--watch``'s loop in :mod:`.watch`, the
model flags in :mod:`.model`), the process table (:mod:`.processes`), reservations for people
(:mod:`.reservations`), text fitted to a terminal (:mod:`.format`) and the one output writer (:mod:`.output`).
``import devmem`` never imports it."""
